// The cpu backend's single-image conv and pooling paths on the shapes that pick each of them
// (channels by rows, channels flat for 1-wide kernels, rows; pooling over whole windows, vectorised,
// and with padding, window by window), with every kernel set: within the reference's tolerance,
// and bitwise equal to the same image computed in a tile (the images of a batch of 17 against
// each image alone). Outputs start as NaN, so an element never written fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace {

using formats::OpType;
using testing_support::window;
using Kernels = engine::cpu::CpuOptions::Kernels;

constexpr double kTolerance = 1e-5;

bool runnable(Kernels k) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (k == Kernels::Avx512) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                                   __builtin_cpu_supports("fma");
  if (k == Kernels::Avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return k == Kernels::Portable;
}

// Against the reference for batches 1 and 17, and each image of the batch of 17 (16 in a tile with
// AVX-512, the rest on the single-image path) bitwise equal to that image run alone.
void check(const std::shared_ptr<formats::Model>& model, uint32_t seed, const std::string& what) {
  const int64_t per = formats::element_count(model->input.raw_shape);
  constexpr int kBatch = 17;
  const auto input = testing_support::random_floats(size_t(per) * kBatch, seed, -3.0f, 1.0f);
  for (Kernels k : {Kernels::Avx512, Kernels::Avx2, Kernels::Portable}) {
    if (!runnable(k)) continue;
    auto backend = engine::cpu::make_cpu_backend(engine::cpu::CpuOptions{k});
    for (int batch : {1, kBatch}) {
      const auto c = testing_support::compare_with_cpu(model, *backend, input.data(), batch, batch + 2);
      EXPECT_EQ(c.unwritten, 0u) << what << " batch " << batch;
      EXPECT_LE(c.max_abs_error, kTolerance) << what << " batch " << batch << ": " << c.worst;
    }
    const auto all = testing_support::run_backend(model, *backend, input.data(), kBatch, kBatch).at(0);
    const size_t out = all.size() / kBatch;
    for (int i = 0; i < kBatch; ++i) {
      const std::vector<float> one_in(input.begin() + i * per, input.begin() + (i + 1) * per);
      const auto one = testing_support::run_backend(model, *backend, one_in.data(), 1, 1).at(0);
      ASSERT_EQ(one.size(), out);
      EXPECT_EQ(std::memcmp(one.data(), all.data() + size_t(i) * out, out * sizeof(float)), 0)
          << what << ": image " << i << " alone differs from its batch's bits (kernels " << int(k) << ")";
    }
  }
}

// The plan summary of the model on the best kernel set (what it fused, which paths).
std::string plan_of(const std::shared_ptr<formats::Model>& model) {
  return engine::cpu::make_cpu_backend()->compile(engine::plan_graph(model), engine::CompileOptions{})->plan_summary();
}

TEST(CpuConvPaths, ChannelsByRowsFlatAndRowsAgree) {
  struct Case {
    int C, H, W, O;
    formats::Window2D win;
  };
  const Case cases[] = {
      {3, 32, 32, 32, window(3, 3, 1, 1, 1, 1, 1, 1)},    // CIFAR first layer: 3 input channels
      {16, 8, 8, 128, window(3, 3, 1, 1, 1, 1, 1, 1)},    // 8-wide rows, 128 channels
      {8, 7, 7, 48, window(3, 3, 1, 1, 1, 1, 1, 1)},      // 7-wide rows, 3 vectors of 16
      {16, 14, 14, 24, window(3, 3, 1, 1, 1, 1, 1, 1)},   // rows fill 14 of 16, channels 24 of 32
      {9, 26, 26, 20, window(3, 3, 1, 1)},                // 'valid', 20 channels
      {16, 11, 13, 40, window(1, 1, 1, 1)},               // 1x1: the flat grid across rows
      {5, 17, 17, 33, window(5, 5, 1, 1, 2, 2, 2, 2)},    // 5x5 'same', 33 channels
      {16, 16, 16, 32, window(3, 3, 2, 2, 1, 1, 1, 1)},   // stride 2
      {1, 28, 28, 6, window(5, 5, 1, 1)},                 // few channels: along rows
      {4, 20, 20, 16, window(3, 3, 1, 1, 1, 1, 1, 1)},    // one vector of channels, 20 positions
      {3, 22, 22, 13, window(3, 3, 1, 1)},                // 13 channels, 20 positions
      {7, 9, 30, 5, window(3, 3, 1, 1, 1, 1, 1, 1)},      // 5 channels, rows of 15 + 15
  };
  uint32_t seed = 7000;
  for (const auto& c : cases) {
    formats::Node attrs;
    attrs.window = c.win;
    attrs.out_channels = c.O;
    auto model = testing_support::single_op_model(OpType::Conv2D, {c.C, c.H, c.W}, attrs, seed++, true);
    check(model, seed++, "conv " + formats::shape_to_string({c.C, c.H, c.W}) + " -> " + std::to_string(c.O));
  }
}

TEST(CpuConvPaths, PoolsWholeWindowsAndPadded) {
  struct Case {
    int C, H, W;
    formats::Window2D win;
  };
  const Case cases[] = {
      {5, 13, 11, window(3, 3, 2, 2)},           // whole windows, odd sizes, last columns unused
      {3, 9, 300, window(2, 2, 1, 1)},           // rows longer than one pass of starting columns
      {4, 7, 20, window(3, 2, 1, 3)},            // column stride 3
      {2, 8, 8, window(2, 2, 2, 2, 1, 0, 1, 0)}, // padded: window by window
  };
  uint32_t seed = 8000;
  for (const auto& c : cases)
    for (OpType op : {OpType::MaxPool, OpType::AvgPool}) {
      formats::Node attrs;
      attrs.window = c.win;
      attrs.count_include_pad = false;
      auto model = testing_support::single_op_model(op, {c.C, c.H, c.W}, attrs, seed++);
      check(model, seed++, std::string(formats::op_name(op)) + " " + formats::shape_to_string({c.C, c.H, c.W}));
    }
}

// A 2x2 stride-2 max pool after a conv the single-image path runs across channels is fused into
// the conv's store (KStep::pool2): odd sizes (a last row and column the pool drops), with and
// without an activation between, with padding and without, and one whose conv value has a
// second reader (not fused). The plan summary says how many were fused.
TEST(CpuConvPaths, MaxPoolFusedIntoTheConv) {
  using testing_support::ModelBuilder;
  struct Case {
    int C, H, W, O;
    formats::Window2D win;
    bool relu;
  };
  const Case cases[] = {
      {3, 32, 32, 32, window(3, 3, 1, 1, 1, 1, 1, 1), true},   // CIFAR's first block
      {16, 7, 7, 40, window(3, 3, 1, 1, 1, 1, 1, 1), true},    // 7 -> 3: last row and column unused
      {5, 15, 13, 20, window(3, 3, 1, 1), false},              // 'valid', odd, no activation
      {8, 18, 30, 17, window(5, 5, 1, 1, 2, 2, 2, 2), true},   // 5x5 'same', 15 pooled columns
      {4, 19, 21, 16, window(3, 3, 2, 2, 1, 1, 1, 1), true},   // stride 2: 10 x 11 -> 5 x 5
  };
  uint32_t seed = 9000;
  for (const auto& c : cases) {
    const formats::Shape in{c.C, c.H, c.W};
    ModelBuilder b("conv_pool", in);
    b.conv2d("c", "x", c.C, c.O, c.win, seed++);
    if (c.relu) b.unary("r", OpType::Relu, "c");
    auto model = b.pool("p", OpType::MaxPool, c.relu ? "r" : "c", window(2, 2, 2, 2)).outputs({"p"}).build();
    const std::string what = "conv+pool " + formats::shape_to_string(in) + " -> " + std::to_string(c.O);
    const auto plan = plan_of(model);
    EXPECT_NE(plan.find(", 1 max pools and"), std::string::npos) << what << ": " << plan;
    check(model, seed++, what);
  }
  // The conv's value also a model output: the pool stays a step of its own.
  auto model = ModelBuilder("conv_pool_two_readers", {6, 12, 12})
                   .conv2d("c", "x", 6, 32, window(3, 3, 1, 1, 1, 1, 1, 1), seed++)
                   .pool("p", OpType::MaxPool, "c", window(2, 2, 2, 2))
                   .outputs({"p", "c"})
                   .build();
  const auto plan = plan_of(model);
  EXPECT_NE(plan.find(", 0 max pools and"), std::string::npos) << plan;
  check(model, seed++, "conv read by a pool and as an output");
}

// A conv whose value only the next padded conv reads writes it zero-bordered, and that conv reads
// it in place (KStep::out_wp, in_bordered): chains of padded convs, after a fused pool, at stride 2,
// with asymmetric padding, odd sizes; a value with a second reader keeps the plain layout.
TEST(CpuConvPaths, ConvWritesTheNextConvsBorderedInput) {
  using testing_support::ModelBuilder;
  uint32_t seed = 9500;
  auto chain = ModelBuilder("conv_chain", {3, 19, 17})
                   .conv2d("a", "x", 3, 32, window(3, 3, 1, 1, 1, 1, 1, 1), seed)
                   .unary("ra", OpType::Relu, "a")
                   .conv2d("b", "ra", 32, 20, window(5, 5, 1, 1, 2, 2, 2, 2), seed + 2)
                   .pool("pb", OpType::MaxPool, "b", window(2, 2, 2, 2))
                   .conv2d("c", "pb", 20, 48, window(3, 3, 2, 2, 1, 1, 1, 1), seed + 4)
                   .unary("rc", OpType::Tanh, "c")
                   .conv2d("d", "rc", 48, 17, window(3, 3, 1, 1, 0, 2, 1, 0), seed + 6)
                   .conv2d("e", "d", 17, 33, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 8)
                   .outputs({"e"})
                   .build();
  auto plan = plan_of(chain);
  EXPECT_NE(plan.find("4 writing the next conv's zero-bordered input"), std::string::npos) << plan;
  check(chain, seed + 10, "chain of padded convs");
  // a's value read by b and by a pool: plain. b's read by c and by the add fused into c: bordered,
  // the add reading it at the bordered offsets.
  auto shared = ModelBuilder("conv_shared", {4, 10, 10})
                    .conv2d("a", "x", 4, 32, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 12)
                    .conv2d("b", "a", 32, 32, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 14)
                    .conv2d("c", "b", 32, 32, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 16)
                    .add("s", "b", "c")
                    .pool("p", OpType::MaxPool, "a", window(2, 2, 2, 2))
                    .outputs({"s", "p"})
                    .build();
  plan = plan_of(shared);
  EXPECT_NE(plan.find("1 writing the next conv's zero-bordered input"), std::string::npos) << plan;
  EXPECT_NE(plan.find("1 adds fused"), std::string::npos) << plan;
  check(shared, seed + 18, "conv read by a conv and an add, conv read by a conv and a pool");
}

// An add that is a conv's only reader, and a relu after it, fused into the conv's store
// (KStep::add_in1): residual blocks as resnet20's, identity shortcuts and a strided 1x1 projection
// computed after the conv the add follows (the add then fuses into the projection), odd sizes.
TEST(CpuConvPaths, AddFusedIntoTheConv) {
  using testing_support::ModelBuilder;
  uint32_t seed = 9700;
  auto model = ModelBuilder("residual", {5, 13, 11})
                   .conv2d("stem", "x", 5, 16, window(3, 3, 1, 1, 1, 1, 1, 1), seed)
                   .unary("r0", OpType::Relu, "stem")
                   .conv2d("a1", "r0", 16, 16, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 2)
                   .unary("ra1", OpType::Relu, "a1")
                   .conv2d("b1", "ra1", 16, 16, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 4)
                   .add("s1", "b1", "r0")
                   .unary("r1", OpType::Relu, "s1")
                   .conv2d("a2", "r1", 16, 40, window(3, 3, 2, 2, 1, 1, 1, 1), seed + 6)
                   .unary("ra2", OpType::Relu, "a2")
                   .conv2d("b2", "ra2", 40, 40, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 8)
                   .conv2d("p2", "r1", 16, 40, window(1, 1, 2, 2), seed + 10)
                   .add("s2", "b2", "p2")
                   .unary("r2", OpType::Relu, "s2")
                   .conv2d("b3", "r2", 40, 40, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 12)
                   .add("s3", "r2", "b3")
                   .outputs({"s3"})
                   .build();
  const auto plan = plan_of(model);
  EXPECT_NE(plan.find("3 adds fused"), std::string::npos) << plan;
  check(model, seed + 14, "residual blocks");
  for (auto schedule : {engine::cpu::CpuOptions::Schedule::Tiles, engine::cpu::CpuOptions::Schedule::Images}) {
    engine::cpu::CpuOptions o;
    o.schedule = schedule;
    auto b = engine::cpu::make_cpu_backend(o);
    const auto input = testing_support::random_floats(5 * 13 * 11 * 21, seed + 16, -3.0f, 1.0f);
    const auto c = testing_support::compare_with_cpu(model, *b, input.data(), 21, 21);
    EXPECT_EQ(c.unwritten, 0u);
    EXPECT_LE(c.max_abs_error, kTolerance) << c.worst;
  }
}

}  // namespace

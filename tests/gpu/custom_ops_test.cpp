// --backend=custom, one op at a time against the CPU reference (compare_with_cpu): fresh random
// inputs, odd shapes and non-multiple-of-tile sizes, batch 1, a partial batch and large batches.
// Every test needs the backend (a GPU): without one it is reported as skipped.
#include <gtest/gtest.h>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/custom_test_util.hpp"

namespace {

using custom_test::expect_matches_cpu_all_batches;
using formats::OpType;
using testing_support::single_op_model;
using testing_support::window;

using gpu_test::conv_attrs;
using gpu_test::dense_attrs;
using gpu_test::pool_attrs;

struct ConvCase {
  formats::Shape input;
  int out_channels;
  formats::Window2D win;
  bool bias = true;
};

TEST(CustomConv2d, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const std::vector<ConvCase> cases = {
      {{1, 32, 32}, 6, window(5, 5, 1, 1)},                   // LeNet c1
      {{3, 17, 23}, 7, window(3, 3, 2, 2, 1, 2, 0, 1)},       // stride 2, asymmetric padding
      {{6, 14, 14}, 16, window(5, 5, 1, 1)},                  // LeNet c3: two thread groups of 8 channels
      {{16, 12, 9}, 16, window(3, 3, 1, 1, 1, 1, 1, 1), false},  // 16 channels, 'same', no bias
      {{2, 9, 40}, 33, window(2, 7, 3, 1, 1, 0, 3, 2)},       // several output-channel groups, odd sizes
      {{5, 1, 1}, 70, window(1, 1, 1, 1)},                    // 1x1 output: many channels per block
      {{100, 6, 6}, 12, window(3, 3, 1, 1, 1, 1, 1, 1)},      // input channels in several shared-memory chunks
      {{3, 31, 29}, 5, window(7, 5, 4, 3, 3, 2, 1, 4)},       // large stride, uneven padding
      {{1, 70, 45}, 2, window(2, 2, 1, 1, 1, 1, 0, 1)},       // several tiles in both directions, even kernel
  };
  uint32_t seed = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE("conv2d input " + formats::shape_to_string(c.input) + " -> " + std::to_string(c.out_channels));
    auto model = single_op_model(OpType::Conv2D, c.input, conv_attrs(c.out_channels, c.win), seed, c.bias);
    expect_matches_cpu_all_batches(model, seed);
    seed += 10;
  }
}

// A window too large to stage in shared memory (40x41 filters x 8 channels > 48 KiB): the direct
// fallback kernel.
TEST(CustomConv2d, HugeWindowUsesDirectKernel) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = single_op_model(OpType::Conv2D, {2, 45, 47}, conv_attrs(3, window(40, 41, 2, 3, 3, 4, 5, 6)), 7);
  for (const auto& bc : std::vector<custom_test::BatchCase>{{1, 1}, {7, 32}, {32, 32}})
    custom_test::expect_matches_cpu(model, bc, 77);
}

struct PoolCase {
  formats::Shape input;
  formats::Window2D win;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{6, 28, 28}, window(2, 2, 2, 2)},
      {{3, 17, 23}, window(3, 3, 2, 2, 1, 2, 0, 1)},
      {{5, 9, 9}, window(3, 2, 1, 2, 2, 0, 1, 1)},
      {{16, 10, 10}, window(2, 2, 2, 2)},
      {{2, 7, 11}, window(4, 4, 3, 3, 3, 3, 3, 3)},  // windows mostly in the padding
      {{1, 1, 1}, window(1, 1, 1, 1)},
  };
  return cases;
}

TEST(CustomPool, MaxPoolMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  uint32_t seed = 300;
  for (const auto& c : pool_cases()) {
    SCOPED_TRACE("maxpool input " + formats::shape_to_string(c.input));
    expect_matches_cpu_all_batches(single_op_model(OpType::MaxPool, c.input, pool_attrs(c.win), seed), seed);
    seed += 10;
  }
}

TEST(CustomPool, AvgPoolMatchesCpuBothPaddingModes) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  uint32_t seed = 400;
  for (bool include : {true, false}) {
    for (const auto& c : pool_cases()) {
      SCOPED_TRACE("avgpool input " + formats::shape_to_string(c.input) +
                   (include ? " count_include_pad" : " exclude pad"));
      expect_matches_cpu_all_batches(single_op_model(OpType::AvgPool, c.input, pool_attrs(c.win, include), seed),
                                     seed);
      seed += 10;
    }
  }
}

TEST(CustomElementwise, ActivationsMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  uint32_t seed = 500;
  for (OpType op : {OpType::Relu, OpType::Tanh, OpType::Sigmoid}) {
    for (const formats::Shape& shape : std::vector<formats::Shape>{{7, 13, 5}, {1000}, {1}}) {
      SCOPED_TRACE(std::string(formats::op_name(op)) + " " + formats::shape_to_string(shape));
      // Wide range: saturated tanh/sigmoid, tiny sigmoid values (exp in double, as the CPU).
      expect_matches_cpu_all_batches(single_op_model(op, shape, formats::Node{}, seed), seed, -30.0f, 30.0f);
      ++seed;
    }
  }
}

TEST(CustomElementwise, AddMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (const formats::Shape& shape : std::vector<formats::Shape>{{3, 8, 8}, {1000}, {1}}) {
    SCOPED_TRACE("add " + formats::shape_to_string(shape));
    expect_matches_cpu_all_batches(testing_support::add_dag_model(shape), 600);   // add(relu(x), tanh(x))
    expect_matches_cpu_all_batches(single_op_model(OpType::Add, shape, formats::Node{}, 601), 601);  // add(x, x)
  }
}

TEST(CustomFlatten, IsAViewWithExactValues) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  // flatten of the input, then a relu reading the flattened view.
  auto model = testing_support::ModelBuilder("flatten_view", {3, 5, 7})
                   .unary("f", OpType::Flatten, "x")
                   .unary("r", OpType::Relu, "f")
                   .outputs({"r", "f"})
                   .build();
  const int batch = 9;
  const auto input = testing_support::random_floats(size_t(105) * batch, 700);
  const auto out = testing_support::run_backend(model, "custom", input.data(), batch, 16);
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[1].size(), input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    ASSERT_EQ(out[1][i], input[i]) << "flatten element " << i;
    ASSERT_EQ(out[0][i], input[i] > 0 ? input[i] : 0.0f) << "relu element " << i;
  }
}

TEST(CustomDense, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  struct Case {
    int in, units;
    bool bias;
  };
  const std::vector<Case> cases = {{400, 120, true}, {1, 1, true},     {1000, 37, true}, {257, 513, true},
                                   {84, 10, true},   {50, 3, false},   {16, 64, true},   {17, 65, false}};
  uint32_t seed = 800;
  for (const auto& c : cases) {
    SCOPED_TRACE("dense " + std::to_string(c.in) + " -> " + std::to_string(c.units));
    expect_matches_cpu_all_batches(single_op_model(OpType::Dense, {c.in}, dense_attrs(c.units), seed, c.bias), seed);
    seed += 10;
  }
}

TEST(CustomSoftmax, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  uint32_t seed = 900;
  for (int k : {10, 1, 1000, 37, 33}) {
    SCOPED_TRACE("softmax " + std::to_string(k));
    expect_matches_cpu_all_batches(single_op_model(OpType::Softmax, {k}, formats::Node{}, seed), seed, -20.0f, 20.0f);
    ++seed;
  }
  // Large logits: exp would overflow without subtracting the maximum.
  expect_matches_cpu_all_batches(single_op_model(OpType::Softmax, {10}, formats::Node{}, seed), seed, -500.0f, 500.0f);
}

const std::vector<formats::Shape>& scale_concat_shapes() {
  static const std::vector<formats::Shape> shapes = {{3, 8, 8}, {7, 13, 5}, {1000}, {1}, {17, 1, 1}, {2, 19}};
  return shapes;
}

// Per-channel affine map: double arithmetic rounded once, the reference's own, so 1e-5 holds with room.
TEST(CustomScaleShift, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  uint32_t seed = 1000;
  for (const formats::Shape& shape : scale_concat_shapes()) {
    SCOPED_TRACE("scale_shift " + formats::shape_to_string(shape));
    expect_matches_cpu_all_batches(single_op_model(OpType::ScaleShift, shape, formats::Node{}, seed), seed, -3.0f,
                                   3.0f);
    seed += 10;
  }
}

// Copies only: each input's values land exactly in its slice of every sample.
TEST(CustomConcat, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  uint32_t seed = 1100;
  for (const formats::Shape& shape : scale_concat_shapes()) {
    SCOPED_TRACE("concat " + formats::shape_to_string(shape));
    expect_matches_cpu_all_batches(testing_support::concat_dag_model(shape), seed, -3.0f, 3.0f);
    expect_matches_cpu_all_batches(single_op_model(OpType::Concat, shape, formats::Node{}, seed + 1), seed + 1);
    seed += 10;
  }
}

// Conv branches joined by concat, pooling, scale_shift on channels and features: the per-node kernels
// with fusion off, the general path with it on (the execution path says why the fused chain does not
// take it).
TEST(CustomScaleShiftConcat, BranchyModelRunsPerNodeOrGeneralAndMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = testing_support::branchy_model({2, 8, 10}, 1200);
  expect_matches_cpu_all_batches(model, 1200);
  engine::CompileOptions fuse;
  fuse.max_batch = 8;
  auto exe = engine::BackendRegistry::instance().create("custom")->compile(engine::plan_graph(model), fuse);
  const std::string path = exe->execution_path();
  EXPECT_NE(path.find("general fp32 ("), std::string::npos) << path;
  EXPECT_NE(path.find("fused chain not taken: node 'ab' (concat) has no fused kernel"), std::string::npos) << path;
  // The same with fusion on (the default options: fp32 sums), against the reference.
  const auto input = testing_support::random_floats(size_t(160) * 8, 1201);
  const auto c = testing_support::compare_with_cpu(model, "custom", input.data(), 8, 8);
  EXPECT_EQ(c.unwritten, 0u);
  EXPECT_LE(c.max_rel_error, 2e-4) << c.worst;
}

}  // namespace

// Batches past 65,535 samples (the end of 16-bit grid dimensions): every op kind, full and partial.
TEST(CustomHugeBatch, EveryOpMatchesCpuPast65535Samples) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  uint32_t seed = 4200;
  for (const auto& m : gpu_test::huge_batch_models()) {
    SCOPED_TRACE(m.model->name);
    for (const auto& bc : gpu_test::huge_batch_cases()) custom_test::expect_matches_cpu(m.model, bc, seed++, m.lo, m.hi);
  }
}

// The fast "cpu" backend against the "reference" oracle: every op on fresh random inputs of many
// shapes (odd sizes, padding, strides, every activation, fused and not), every committed model on
// its whole test set, and bitwise reproducibility across thread counts and batch splits. Output
// buffers start as NaN (compare_with_cpu, run_all below), so an element never written fails.
// Each test runs with the kernels this CPU picks (AVX-512 where present), with the AVX2 ones where
// the CPU has them, and with the portable ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "formats/idx.hpp"
#include "formats/model_loader.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ENGINE_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENGINE_TEST_UNDER_ASAN 1
#endif
#endif

namespace {

using formats::OpType;
using testing_support::window;

// Every output within 1e-5 of the reference (the test inputs and weights keep values of order 1:
// an fp32 sum of k terms is off by about sqrt(k) ulps of its terms, ~1e-6 for k = 784). The relative
// error (compare.hpp: |a - r| / max(|r|, 1e-2 * peak)) stays far below what a wrong tap, lane or
// index gives (order 1).
constexpr double kTolerance = 1e-5;
constexpr double kRelTolerance = 1e-3;
// Batch sizes that exercise whole tiles (16 with AVX-512, 8 with AVX2, 4 portable), partial tiles
// and single images.
constexpr int kBatches[] = {1, 2, 3, 5, 8, 13, 16, 37};

bool cpu_has(const char* feature) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (std::string(feature) == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return std::string(feature) == "portable";
}

// Runs the test body with the kernels this CPU picks ("best"), and with the avx2 and the portable
// ones (CpuOptions::kernels), each through a cpu backend made for it.
class FastCpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    // "KERNELS" or "KERNELS-images": the kernel set, and the images schedule instead of the default.
    std::string kernels = GetParam();
    engine::cpu::CpuOptions options;
    if (const size_t dash = kernels.find("-images"); dash != std::string::npos) {
      options.schedule = engine::cpu::CpuOptions::Schedule::Images;
      kernels = kernels.substr(0, dash);
    }
    if (kernels != "best") {
      if (!cpu_has(kernels.c_str())) GTEST_SKIP() << "this CPU cannot run the " << kernels << " kernels";
      options.kernels = *engine::cpu::parse_kernels(kernels);
    }
    cpu_ = engine::cpu::make_cpu_backend(options);
  }

  engine::Backend& cpu() { return *cpu_; }

  // `classifier`: the first output is a probability vector, whose argmax must agree too (elsewhere
  // saturated values tie, and the argmax of a tie means nothing).
  void expect_matches_reference(const std::shared_ptr<formats::Model>& model, const void* input, int batch,
                                const std::string& what, bool classifier = false) {
    const auto c = testing_support::compare_with_cpu(model, cpu(), input, batch, batch + 2);
    EXPECT_EQ(c.unwritten, 0u) << what << " batch " << batch;
    EXPECT_LE(c.max_abs_error, kTolerance) << what << " batch " << batch;
    EXPECT_LE(c.max_rel_error, kRelTolerance) << what << " batch " << batch << ": " << c.worst;
    if (classifier) EXPECT_EQ(c.argmax_mismatches, 0u) << what << " batch " << batch;
  }

  void check_float_model(const std::shared_ptr<formats::Model>& model, uint32_t seed, float lo, float hi,
                         const std::string& what) {
    const int64_t per = formats::element_count(model->input.raw_shape);
    for (int batch : kBatches) {
      const auto input = testing_support::random_floats(size_t(per) * batch, seed++, lo, hi);
      expect_matches_reference(model, input.data(), batch, what);
    }
  }

 private:
  std::unique_ptr<engine::Backend> cpu_;
};

TEST_P(FastCpu, Conv2dShapesPaddingStrides) {
  struct Case {
    int C, H, W, O;
    formats::Window2D win;
  };
  const Case cases[] = {
      {1, 32, 32, 6, window(5, 5, 1, 1)},                 // LeNet c1
      {6, 14, 14, 16, window(5, 5, 1, 1)},                // LeNet c3
      {3, 7, 9, 5, window(3, 3, 1, 1, 1, 1, 1, 1)},       // same padding, odd sizes
      {2, 11, 8, 7, window(3, 2, 2, 3, 2, 0, 1, 1)},      // strides, asymmetric padding
      {1, 28, 28, 4, window(2, 2, 1, 1, 0, 1, 0, 1)},     // seed002-cnn's "same" 2x2
      {4, 5, 5, 9, window(1, 1, 1, 1)},                   // 1x1
      {3, 9, 13, 2, window(4, 4, 3, 3, 3, 3, 3, 3)},      // padding as wide as the kernel - 1
      {1, 1, 1, 3, window(3, 3, 1, 1, 1, 1, 1, 1)},       // one pixel, all else padding
      {5, 6, 19, 17, window(2, 5, 1, 2, 0, 1, 2, 0)},     // 17 channels: every block remainder
      {2, 3, 40, 3, window(3, 7, 1, 1, 1, 1, 3, 3)},      // rows longer than two vectors
      // Real models' shapes: many channels (the single-image kernel across channels, flat over the
      // padded-width grid at stride 1, by rows at stride 2), 'same' and 'valid', 3x3 and 5x5.
      {32, 13, 11, 64, window(3, 3, 1, 1, 1, 1, 1, 1)},   // 'same' 3x3, 64 channels, odd sizes
      {16, 12, 12, 33, window(3, 3, 1, 1)},               // 'valid' 3x3, 33 channels
      {8, 15, 9, 40, window(3, 3, 2, 2, 1, 1, 1, 1)},     // stride 2
      {3, 17, 17, 24, window(5, 5, 1, 1, 2, 2, 2, 2)},    // 'same' 5x5
      {24, 9, 10, 128, window(1, 1, 2, 2)},               // 1x1 stride 2, 128 channels
  };
  uint32_t seed = 1000;
  for (const auto& c : cases)
    for (bool bias : {true, false}) {
      formats::Node attrs;
      attrs.window = c.win;
      attrs.out_channels = c.O;
      auto model = testing_support::single_op_model(OpType::Conv2D, {c.C, c.H, c.W}, attrs, seed++, bias);
      check_float_model(model, seed, -1, 1, "conv " + formats::shape_to_string({c.C, c.H, c.W}) + " -> " +
                                                std::to_string(c.O) + (bias ? "" : " no bias"));
      seed += 10;
    }
}

TEST_P(FastCpu, PoolsBothPaddingRules) {
  struct Case {
    int C, H, W;
    formats::Window2D win;
  };
  const Case cases[] = {
      {6, 28, 28, window(2, 2, 2, 2)},
      {3, 7, 9, window(3, 3, 2, 2, 1, 1, 1, 1)},
      {2, 10, 5, window(3, 2, 1, 3, 2, 0, 0, 1)},
      {1, 4, 4, window(4, 4, 1, 1, 3, 3, 3, 3)},
      {16, 10, 10, window(3, 3, 2, 2, 1, 0, 1, 0)},
  };
  uint32_t seed = 2000;
  for (const auto& c : cases)
    for (OpType op : {OpType::AvgPool, OpType::MaxPool})
      for (bool include_pad : {true, false}) {
        formats::Node attrs;
        attrs.window = c.win;
        attrs.count_include_pad = include_pad;
        auto model = testing_support::single_op_model(op, {c.C, c.H, c.W}, attrs, seed++);
        // Mostly negative: a padded zero must not win a max.
        check_float_model(model, seed, -3, 1, std::string(formats::op_name(op)) + " " +
                                                  formats::shape_to_string({c.C, c.H, c.W}));
        seed += 10;
      }
}

TEST_P(FastCpu, ActivationsAddFlatten) {
  const formats::Shape shapes[] = {{3, 5, 7}, {1}, {100}, {19}};
  uint32_t seed = 3000;
  for (const auto& shape : shapes)
    for (OpType op : {OpType::Relu, OpType::Tanh, OpType::Sigmoid, OpType::Flatten, OpType::Add}) {
      auto model = testing_support::single_op_model(op, shape, formats::Node{}, seed++);
      // Saturating values, and the small range where tanh takes its polynomial branch.
      check_float_model(model, seed, -30, 30, std::string(formats::op_name(op)) + " wide");
      check_float_model(model, seed + 50, -1, 1, std::string(formats::op_name(op)) + " narrow");
      seed += 100;
    }
  auto dag = testing_support::add_dag_model({2, 3, 5});
  check_float_model(dag, 3999, -2, 2, "add(relu(x), tanh(x))");
}

TEST_P(FastCpu, DenseAndSoftmax) {
  const int sizes[][2] = {{1, 1}, {7, 13}, {400, 120}, {84, 10}, {9, 17}, {784, 500}};
  uint32_t seed = 4000;
  for (const auto& size : sizes)
    for (bool bias : {true, false}) {
      formats::Node attrs;
      attrs.units = size[1];
      auto model = testing_support::single_op_model(OpType::Dense, {size[0]}, attrs, seed++, bias);
      check_float_model(model, seed, -1, 1, "dense " + std::to_string(size[0]) + " -> " + std::to_string(size[1]));
      seed += 10;
    }
  for (int k : {1, 10, 37}) {
    auto model = testing_support::single_op_model(OpType::Softmax, {k}, formats::Node{}, seed++);
    check_float_model(model, seed, -5, 5, "softmax " + std::to_string(k));
    check_float_model(model, seed + 20, 990, 1000, "softmax near 1000 " + std::to_string(k));
    seed += 40;
  }
}

// Activations fused into the conv or dense before them, and left standalone where the value has
// another reader or is an output.
TEST_P(FastCpu, FusedActivationsInLenetLikeModels) {
  uint32_t seed = 5000;
  for (OpType act3 : {OpType::Relu, OpType::Tanh, OpType::Sigmoid})
    for (bool logits : {false, true}) {
      testing_support::LenetLike o;
      o.seed = seed;
      o.act3 = act3;
      o.act6 = act3 == OpType::Tanh ? OpType::Sigmoid : OpType::Tanh;
      o.logits_output = logits;
      o.s4_window = logits ? window(3, 3, 2, 2, 1, 0, 1, 0) : window(2, 2, 2, 2);
      auto model = testing_support::lenet_like_model(o);
      for (int batch : kBatches) {
        const auto pixels = testing_support::random_bytes(size_t(784) * batch, seed + batch);
        expect_matches_reference(model, pixels.data(), batch, "lenet-like " + std::string(formats::op_name(act3)), true);
      }
      seed += 100;
    }
}

// The uint8 preprocessing gives bitwise the reference's values (rows wider and narrower than a
// vector, three channels, asymmetric padding with a pad value).
TEST_P(FastCpu, PreprocessingIsBitwiseTheReferences) {
  for (int width : {4, 19, 40}) {
    formats::Preprocess p;
    p.scale = 0.003921568859368563f;
    p.mean = {0.485f, 0.456f, 0.406f};
    p.std = {0.229f, 0.224f, 0.225f};
    p.pad_top = 2, p.pad_bottom = 1, p.pad_left = 0, p.pad_right = 3;
    p.pad_value = -0.5f;
    auto model = testing_support::ModelBuilder("pre", {1})
                     .uint8_input({3, 5, width}, p)
                     .unary("y", OpType::Flatten, "x")  // the output is the preprocessed input itself
                     .outputs({"y"})
                     .build();
    for (int batch : kBatches) {
      const auto pixels = testing_support::random_bytes(size_t(15 * width) * batch, 700 + batch);
      const auto want = testing_support::run_backend(model, "reference", pixels.data(), batch, batch);
      const auto got = testing_support::run_backend(model, cpu(), pixels.data(), batch, batch);
      ASSERT_EQ(got[0].size(), want[0].size());
      EXPECT_EQ(std::memcmp(got[0].data(), want[0].data(), want[0].size() * sizeof(float)), 0)
          << "width " << width << " batch " << batch;
    }
  }
}

// ---- whole models on their test sets ------------------------------------------------------------

struct Images {
  formats::ImageBatch batch;
  bool found = false;
};

Images test_images(const std::string& path, int64_t limit) {
  Images r;
  if (!std::filesystem::exists(path)) return r;
  r.batch = formats::read_idx_images(path);
  r.batch.count = std::min(r.batch.count, limit);
  r.batch.pixels.resize(size_t(r.batch.count) * 784);
  r.found = true;
  return r;
}

// The first output for every image, in batches of max_batch (the last one partial), NaN-poisoned.
std::vector<float> run_all(engine::Backend& backend, const std::shared_ptr<const formats::Model>& model,
                           const formats::ImageBatch& images, int max_batch, int threads) {
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = max_batch;
  options.threads = threads;
  auto exe = backend.compile(graph, options);
  std::vector<std::vector<float>> outputs;
  std::vector<float*> pointers;
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    outputs.emplace_back(size_t(graph.output_elements(i)) * size_t(max_batch));
  for (auto& o : outputs) pointers.push_back(o.data());
  const size_t k = size_t(graph.output_elements(0));
  std::vector<float> all(k * size_t(images.count), std::nanf(""));
  for (int64_t start = 0; start < images.count; start += max_batch) {
    const int n = int(std::min<int64_t>(max_batch, images.count - start));
    for (auto& o : outputs) std::fill(o.begin(), o.end(), std::nanf(""));
    exe->run(images.pixels.data() + size_t(start) * 784, n, pointers);
    std::copy(outputs[0].begin(), outputs[0].begin() + ptrdiff_t(k * size_t(n)), all.begin() + ptrdiff_t(k * size_t(start)));
  }
  return all;
}

#ifdef ENGINE_TEST_UNDER_ASAN
constexpr int64_t kImageLimit = 500;  // ASan is ~20x slower; the full sets run in the plain build
#else
constexpr int64_t kImageLimit = 10000;
#endif

TEST_P(FastCpu, EveryCommittedModelOnItsTestSet) {
  const std::string models = std::string(ENGINE_SOURCE_DIR) + "/models/";
  const std::string mnist = std::string(ENGINE_TEST_DATA_DIR) + "/mnist/t10k-images-idx3-ubyte.gz";
  const std::string fashion = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  const std::pair<const char*, std::string> cases[] = {
      {"lenet5", mnist}, {"seed002-cnn", mnist}, {"seed003-mlp", mnist}, {"lenet5-fashion", fashion}};
  int ran = 0;
  for (const auto& [name, data] : cases) {
    const std::string path = models + name + ".json";
    const Images images = test_images(data, kImageLimit);
    if (!std::filesystem::exists(path) || !images.found) continue;
    auto model = std::make_shared<const formats::Model>(formats::load_model(path));
    const auto ref = run_all(*engine::BackendRegistry::instance().create("reference"), model, images.batch, 1000, 0);
    const auto got = run_all(cpu(), model, images.batch, 1000, 0);
    const size_t k = ref.size() / size_t(images.batch.count);
    double max_abs = 0;
    size_t same = 0, nan = 0;
    for (int64_t s = 0; s < images.batch.count; ++s) {
      const float* r = ref.data() + size_t(s) * k;
      const float* g = got.data() + size_t(s) * k;
      for (size_t j = 0; j < k; ++j) {
        if (std::isnan(g[j])) ++nan;
        max_abs = std::max(max_abs, std::fabs(double(g[j]) - double(r[j])));
      }
      same += std::max_element(r, r + k) - r == std::max_element(g, g + k) - g;
    }
    EXPECT_EQ(nan, 0u) << name;
    EXPECT_EQ(same, size_t(images.batch.count)) << name << ": same class as the reference on every image";
    EXPECT_LE(max_abs, 1e-5) << name;
    std::printf("[ info     ] %s (%s kernels): %lld images, same class %zu, max |dp| %.3g\n", name, GetParam(),
                static_cast<long long>(images.batch.count), same, max_abs);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no model/test set pair found (models/, " << mnist << ", " << fashion << ")";
}

// Bitwise identical whatever the thread count and however the images are cut into batches (whole
// tiles, partial tiles, single images all give each image the same bits).
TEST_P(FastCpu, BitwiseAcrossThreadsAndBatchSplits) {
  std::shared_ptr<const formats::Model> model;
  formats::ImageBatch images;
  const std::string lenet = std::string(ENGINE_SOURCE_DIR) + "/models/lenet5.json";
  const Images mnist = test_images(std::string(ENGINE_TEST_DATA_DIR) + "/mnist/t10k-images-idx3-ubyte.gz", 1000);
  if (std::filesystem::exists(lenet) && mnist.found) {
    model = std::make_shared<const formats::Model>(formats::load_model(lenet));
    images = mnist.batch;
  } else {  // random weights and pixels: the property does not depend on the data
    model = testing_support::lenet_like_model();
    images.count = 1000, images.channels = 1, images.height = 28, images.width = 28;
    images.pixels = testing_support::random_bytes(784 * 1000, 77);
  }
  const auto base = run_all(cpu(), model, images, 1000, 1);
  for (float v : base) ASSERT_FALSE(std::isnan(v));
  // Batches of 16 on 3 threads: one tile on 3 threads runs as 16 single images instead.
  for (int threads : {1, 2, 3})
    for (int split : {1, 7, 16, 64, 1000}) {
      if (threads == 1 && split == 1000) continue;
      const auto again = run_all(cpu(), model, images, split, threads);
      ASSERT_EQ(again.size(), base.size());
      EXPECT_EQ(std::memcmp(again.data(), base.data(), base.size() * sizeof(float)), 0)
          << threads << " threads, batches of " << split;
    }
}

TEST_P(FastCpu, ScaleShiftAndConcat) {
  const formats::Shape shapes[] = {{3, 5, 7}, {1}, {100}, {19}, {17, 2, 3}, {2, 19}};
  uint32_t seed = 5000;
  for (const auto& shape : shapes) {
    const std::string where = formats::shape_to_string(shape);
    check_float_model(testing_support::single_op_model(OpType::ScaleShift, shape, formats::Node{}, seed), seed + 1,
                      -3, 3, "scale_shift " + where);
    check_float_model(testing_support::single_op_model(OpType::Concat, shape, formats::Node{}, seed), seed + 2, -3, 3,
                      "concat(x, x) " + where);
    check_float_model(testing_support::concat_dag_model(shape), seed + 3, -3, 3, "concat dag " + where);
    seed += 100;
  }
  // Conv branches joined, relu, pool, scale_shift on channels and on features, as imported models have them.
  check_float_model(testing_support::branchy_model({2, 8, 10}, 5900), 5901, -1, 1, "branchy 2x8x10");
  check_float_model(testing_support::branchy_model({1, 6, 6}, 5910), 5911, -1, 1, "branchy 1x6x6");
}

// A concat/scale_shift model gives the same bits whatever the thread count and batch split.
TEST_P(FastCpu, ScaleShiftAndConcatBitwiseAcrossThreadsAndSplits) {
  auto model = testing_support::branchy_model({2, 8, 10}, 5920);
  const engine::Graph graph = engine::plan_graph(model);
  const int total = 101;
  const auto input = testing_support::random_floats(size_t(160) * total, 5921);
  auto run = [&](int split, int threads) {
    engine::CompileOptions options;
    options.max_batch = split;
    options.threads = threads;
    auto exe = cpu().compile(graph, options);
    std::vector<float> all(size_t(10) * total, std::nanf(""));
    std::vector<float> out(size_t(10) * size_t(split));
    for (int start = 0; start < total; start += split) {
      const int n = std::min(split, total - start);
      std::fill(out.begin(), out.end(), std::nanf(""));
      float* pointers[] = {out.data()};
      exe->run(input.data() + size_t(start) * 160, n, pointers);
      std::copy(out.begin(), out.begin() + ptrdiff_t(10 * n), all.begin() + ptrdiff_t(10 * start));
    }
    return all;
  };
  const auto base = run(total, 1);
  for (float v : base) ASSERT_FALSE(std::isnan(v));
  for (int threads : {1, 2, 3})
    for (int split : {1, 7, 64, total}) {
      const auto again = run(split, threads);
      EXPECT_EQ(std::memcmp(again.data(), base.data(), base.size() * sizeof(float)), 0)
          << threads << " threads, batches of " << split;
    }
}

// Every path skips the same border taps (kernels.hpp): they are not no-ops on the bits. Inputs
// 1e-30 and weights -1e-30 (1e-30 at q = 2): every product underflows, so each sum is a zero whose
// sign is that of its last tap's product, q = 2 (+0), except in the last output column, whose
// q = 2 reads the right border: skipped it leaves -0, added it would make +0 (with FMA; the
// portable set rounds each product to a zero first, and +0 + -0 is +0). 'same' 3x3 convs
// with 4 and 32 output channels (the rows and the channel kernel for single images, the tile
// kernel for tiles), any batch split and thread count.
TEST_P(FastCpu, BorderTapsSkippedAlikeOnEveryPath) {
  const int C = 2, H = 6, Wd = 7, total = 37;
  for (int out_channels : {4, 32}) {
    formats::Node attrs;
    attrs.window = window(3, 3, 1, 1, 1, 1, 1, 1);
    attrs.out_channels = out_channels;
    formats::Tensor w;
    w.shape = {out_channels, C, 3, 3};
    w.values.resize(size_t(out_channels) * C * 9);
    for (size_t i = 0; i < w.values.size(); ++i) w.values[i] = i % 3 == 2 ? 1e-30f : -1e-30f;
    attrs.weight = w;
    auto model = testing_support::single_op_model(OpType::Conv2D, {C, H, Wd}, attrs, 7000, false);
    const engine::Graph graph = engine::plan_graph(model);
    const std::vector<float> input(size_t(C * H * Wd) * total, 1e-30f);
    const int64_t per = int64_t(out_channels) * H * Wd;
    for (int threads : {1, 2})
      for (int split : {1, 7, 16, total}) {
        engine::CompileOptions options;
        options.max_batch = split;
        options.threads = threads;
        auto exe = cpu().compile(graph, options);
        const bool fused = exe->plan_summary().find("sse2") == std::string::npos;
        std::vector<float> out(size_t(per) * size_t(split));
        for (int start = 0; start < total; start += split) {
          const int n = std::min(split, total - start);
          std::fill(out.begin(), out.end(), std::nanf(""));
          float* pointers[] = {out.data()};
          exe->run(input.data() + size_t(start) * C * H * Wd, n, pointers);
          for (int64_t i = 0; i < per * n; ++i) {
            const bool last_column = fused && i % Wd == Wd - 1;
            ASSERT_EQ(out[size_t(i)], 0.0f) << i;
            ASSERT_EQ(std::signbit(out[size_t(i)]), last_column)
                << out_channels << " channels, " << threads << " threads, batches of " << split << ", output " << i;
          }
        }
      }
  }
}

TEST_P(FastCpu, RejectsBadOptionsAndBatches) {
  auto model = testing_support::single_op_model(OpType::Relu, {4}, formats::Node{}, 1);
  const std::vector<float> input(4 * 5, 1.0f);
  EXPECT_THROW(testing_support::run_backend(model, cpu(), input.data(), 5, 4), std::invalid_argument);
  EXPECT_NO_THROW(testing_support::run_backend(model, cpu(), input.data(), 4, 4));
  engine::CompileOptions bad;
  bad.threads = -1;
  EXPECT_THROW(testing_support::run_backend(model, cpu(), input.data(), 1, 1, bad), std::invalid_argument);
  const engine::Graph graph = engine::plan_graph(model);
  auto exe = cpu().compile(graph, {.max_batch = 2});
  const std::string kernels = std::string(GetParam()).substr(0, std::string(GetParam()).find('-'));
  EXPECT_NE(exe->plan_summary().find(kernels == "portable" ? "sse2" : kernels == "avx2" ? "avx2+fma" : "kernels"),
            std::string::npos)
      << exe->plan_summary();
}

// ENGINE_CPU_KERNELS, the operational setting the registry's "cpu" reads: each name, unset or empty
// for the best set, and a clear error for anything else.
TEST(CpuOptions, FromTheEnvironment) {
  using Kernels = engine::cpu::CpuOptions::Kernels;
  const char* before = std::getenv("ENGINE_CPU_KERNELS");
  const std::string saved = before ? before : "";
  const std::pair<const char*, Kernels> cases[] = {
      {"avx512", Kernels::Avx512}, {"avx2", Kernels::Avx2}, {"portable", Kernels::Portable}, {"", Kernels::Best}};
  for (const auto& [value, want] : cases) {
    ::setenv("ENGINE_CPU_KERNELS", value, 1);
    EXPECT_EQ(engine::cpu::cpu_options_from_environment().kernels, want) << value;
  }
  ::setenv("ENGINE_CPU_KERNELS", "sse9", 1);
  EXPECT_THROW(engine::cpu::cpu_options_from_environment(), std::runtime_error);
  ::unsetenv("ENGINE_CPU_KERNELS");
  EXPECT_EQ(engine::cpu::cpu_options_from_environment().kernels, Kernels::Best);
  if (before) ::setenv("ENGINE_CPU_KERNELS", saved.c_str(), 1);
}

// Both schedules give every image the same bits (kernels.hpp): a model with wide convolutions, a
// concat, an add and two dense layers, its images in both, for several batch splits and threads.
TEST(CpuSchedules, TilesAndImagesGiveTheSameBits) {
  using Schedule = engine::cpu::CpuOptions::Schedule;
  formats::Preprocess p;
  p.scale = 1.0f / 255.0f;
  p.mean = {0.5f};
  p.std = {0.25f};
  const auto model = testing_support::ModelBuilder("wide", {1})
                         .uint8_input({1, 28, 28}, p)  // run_all reads 784 pixels per image
                         .conv2d("a", "x", 1, 32, window(3, 3, 1, 1, 1, 1, 1, 1), 11)
                         .unary("ar", OpType::Relu, "a")
                         .conv2d("b", "x", 1, 32, window(5, 5, 1, 1, 2, 2, 2, 2), 12)
                         .add("ab", "ar", "b")
                         .concat("cat", {"ab", "ar"})
                         .pool("pool", OpType::MaxPool, "cat", window(2, 2, 2, 2))
                         .conv2d("c", "pool", 64, 40, window(3, 3, 2, 2), 13)
                         .unary("cr", OpType::Relu, "c")
                         .unary("f", OpType::Flatten, "cr")
                         .dense("d1", "f", 40 * 6 * 6, 64, 14)
                         .unary("d1r", OpType::Relu, "d1")
                         .dense("d2", "d1r", 64, 10, 15)
                         .unary("prob", OpType::Softmax, "d2")
                         .outputs({"prob"})
                         .build();
  formats::ImageBatch images;
  images.count = 203, images.channels = 1, images.height = 28, images.width = 28;
  images.pixels = testing_support::random_bytes(784 * 203, 5);
  for (auto kernels : {engine::cpu::CpuOptions::Kernels::Best, engine::cpu::CpuOptions::Kernels::Portable}) {
    engine::cpu::CpuOptions tiles{kernels, Schedule::Tiles}, per_image{kernels, Schedule::Images};
    const auto base = run_all(*engine::cpu::make_cpu_backend(tiles), model, images, 203, 1);
    for (float v : base) ASSERT_FALSE(std::isnan(v));
    for (auto [split, threads] : {std::pair{203, 1}, {1, 1}, {7, 2}, {64, 3}}) {
      const auto again = run_all(*engine::cpu::make_cpu_backend(per_image), model, images, split, threads);
      ASSERT_EQ(again.size(), base.size());
      EXPECT_EQ(std::memcmp(again.data(), base.data(), base.size() * sizeof(float)), 0)
          << "images schedule, batches of " << split << ", " << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, FastCpu,
                         ::testing::Values("best", "avx2", "portable", "best-images", "avx2-images",
                                           "portable-images"),
                         [](const auto& info) {
                           std::string name = info.param;
                           if (name.find('-') != std::string::npos) name.replace(name.find('-'), 1, "_");
                           return name;
                         });

}  // namespace

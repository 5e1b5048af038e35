// The cpu backend's int8 path (engine/cpu/int8): every int8 product set against plain int32 sums
// (odd shapes, outputs poisoned); single conv2d / dense nodes bit for bit against the path's
// definition recomputed here, and every op against the reference's int8 emulation; the same bits
// for any batch split, thread count and instruction set; LeNet-5 and seed002-cnn on MNIST against
// the emulation; the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "engine/cpu/int8/int8_gemm.hpp"
#include "formats/idx.hpp"
#include "formats/model_loader.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/custom_tc_util.hpp"

namespace {

using engine::cpu::CpuOptions;
using formats::OpType;
using testing_support::window;
namespace i8 = engine::cpu::int8;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define INT8_TEST_CPU_HAS(feature) (__builtin_cpu_init(), __builtin_cpu_supports(feature))
#else
#define INT8_TEST_CPU_HAS(feature) false
#endif

// The int8 product sets this CPU runs, by CpuOptions::Kernels.
std::vector<std::pair<CpuOptions::Kernels, const i8::Int8Gemm*>> gemm_sets() {
  std::vector<std::pair<CpuOptions::Kernels, const i8::Int8Gemm*>> sets{
      {CpuOptions::Kernels::Portable, &i8::int8_gemm_portable()}};
  if (INT8_TEST_CPU_HAS("avx2") && INT8_TEST_CPU_HAS("fma")) sets.push_back({CpuOptions::Kernels::Avx2, i8::int8_gemm_avx2()});
  if (INT8_TEST_CPU_HAS("avx512f") && INT8_TEST_CPU_HAS("avx512bw") && INT8_TEST_CPU_HAS("avx512vl") &&
      INT8_TEST_CPU_HAS("avx512vnni"))
    sets.push_back({CpuOptions::Kernels::Avx512, i8::int8_gemm_avx512vnni()});
  return sets;
}

TEST(Int8Gemm, EverySetGivesThePlainSums) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), weight(-127, 127);
  for (const auto& [kernels, set] : gemm_sets())
    for (int m : {1, 2, 3, 5, 7, 12, 13, 97})
      for (int n : {1, 3, 10, 16, 17, 33, 64, 70})
        for (int kp : {4, 12, 36, 292, 1156}) {
          std::vector<uint8_t> a(size_t(m) * kp);
          std::vector<int8_t> w(size_t(n) * kp);
          for (auto& v : a) v = uint8_t(byte(rng));
          for (auto& v : w) v = int8_t(weight(rng));
          if (kp == 1156) {  // the extremes: the largest sums a model can make
            std::fill(a.begin(), a.begin() + kp, uint8_t(255));
            std::fill(w.begin(), w.begin() + kp, int8_t(-127));
          }
          std::vector<uint8_t> packed(set->packed_bytes(n, kp));
          set->pack(w.data(), n, kp, packed.data());
          const int ldc = i8::round_up(n, i8::kColumnStep);
          std::vector<int32_t> c(size_t(m) * ldc, 0x7f7f7f7f);  // poisoned
          set->gemm(a.data(), m, kp, packed.data(), n, c.data(), ldc);
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              int32_t want = 0;
              for (int k = 0; k < kp; ++k) want += int32_t(a[size_t(i) * kp + k]) * int32_t(w[size_t(j) * kp + k]);
              ASSERT_EQ(c[size_t(i) * ldc + j], want) << set->name << " m " << m << " n " << n << " kp " << kp
                                                      << " at " << i << "," << j;
            }
        }
}

std::unique_ptr<engine::Backend> cpu_with(CpuOptions::Kernels kernels) {
  CpuOptions o;
  o.kernels = kernels;
  return engine::cpu::make_cpu_backend(o);
}

engine::CompileOptions int8_options(int threads = 1) {
  engine::CompileOptions o;
  o.precision = engine::Precision::INT8;
  o.threads = threads;
  return o;
}

// q = clamp(rne(x / s), -127, 127), as the emulation defines it.
int quantized(float x, float s) {
  if (s == 0.0f) return 0;
  return int(std::fmax(-127.0f, std::fmin(127.0f, std::nearbyint(x / s))));
}

// One conv2d over a float input [C, H, W]: the path's definition, float(double(sum q * q_w) *
// (double(s) * double(s_o)) + bias), recomputed from the model here.
std::vector<float> conv_definition(const formats::Model& m, const std::vector<float>& x, int n) {
  const formats::Node& node = m.nodes.front();
  const auto& win = node.window;
  const int c = int(m.input.shape[0]), h = int(m.input.shape[1]), w = int(m.input.shape[2]);
  const int oc = node.out_channels;
  const int oh = (h + win.pad_top + win.pad_bottom - win.kernel_h) / win.stride_h + 1;
  const int ow = (w + win.pad_left + win.pad_right - win.kernel_w) / win.stride_w + 1;
  const float s = float(m.calibration->ranges.front().second) / 127.0f;
  const int64_t per = int64_t(c) * win.kernel_h * win.kernel_w;
  std::vector<float> y(size_t(n) * oc * oh * ow);
  for (int o = 0; o < oc; ++o) {
    const float* wo = node.weight->values.data() + o * per;
    float hi = 0;
    for (int64_t k = 0; k < per; ++k) hi = std::fmax(hi, std::fabs(wo[k]));
    const float so = hi / 127.0f;
    for (int img = 0; img < n; ++img)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          int64_t sum = 0;
          for (int ch = 0; ch < c; ++ch)
            for (int p = 0; p < win.kernel_h; ++p)
              for (int q = 0; q < win.kernel_w; ++q) {
                const int yy = i * win.stride_h + p - win.pad_top, xx = j * win.stride_w + q - win.pad_left;
                if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                const float v = x[((size_t(img) * c + ch) * h + yy) * w + xx];
                sum += int64_t(quantized(v, s)) * quantized(wo[(ch * win.kernel_h + p) * win.kernel_w + q], so);
              }
          const double bias = node.bias ? node.bias->values[size_t(o)] : 0.0;
          y[((size_t(img) * oc + o) * oh + i) * ow + j] = float(double(sum) * (double(s) * double(so)) + bias);
        }
  }
  return y;
}

formats::Calibration input_range(const std::string& name, double range) {
  formats::Calibration cal;
  cal.method = "max";
  cal.images = 1;
  cal.ranges = {{name, range}};
  return cal;
}

TEST(Int8Cpu, ConvolutionsFollowTheDefinitionBitForBit) {
  struct Case {
    int c, h, w, oc;
    formats::Window2D win;
  };
  const Case cases[] = {
      {1, 28, 28, 32, window(3, 3, 1, 1)},                       // the first layer of the MNIST models
      {5, 11, 9, 17, window(5, 5, 2, 2, 2, 2, 2, 2)},            // 5x5 'same'-like, stride 2, odd sizes
      {41, 7, 6, 16, window(3, 3, 1, 1, 1, 1, 1, 1)},            // 41 channels, k not a multiple of 4
      {8, 5, 5, 8, window(1, 1, 1, 1)},                          // 1x1: im2col skipped
      {3, 10, 13, 33, window(3, 3, 2, 2, 0, 1, 1, 0)},     // asymmetric padding
      {16, 16, 16, 70, window(3, 3, 1, 1, 1, 1, 1, 1)},          // many pixel tiles and channel blocks
      {1, 13, 37, 6, window(5, 5, 1, 1, 2, 2, 2, 2)},            // one channel: output pixels across the lanes
      {1, 9, 5, 20, window(3, 7, 1, 1, 0, 0, 3, 3)},             // ... more than 16 channels, 7 taps a row
      {1, 17, 33, 3, window(1, 1, 1, 1)},                        // ... one tap
  };
  uint32_t seed = 1;
  for (const Case& k : cases) {
    auto m = testing_support::ModelBuilder("conv", {k.c, k.h, k.w}).conv2d("y", "x", k.c, k.oc, k.win, seed++)
                 .outputs({"y"}).build();
    m->calibration = input_range("x", 0.8);  // below max |x| = 1: some inputs clamp
    const int n = 3;
    const auto x = testing_support::random_floats(size_t(n) * k.c * k.h * k.w, seed++);
    const auto want = conv_definition(*m, x, n);
    const auto ref = testing_support::run_backend(m, "reference", x.data(), n, n, int8_options())[0];
    for (const auto& [kernels, set] : gemm_sets()) {
      const auto got = testing_support::run_backend(m, *cpu_with(kernels), x.data(), n, n, int8_options())[0];
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(testing_support::first_bit_difference(got, want), got.size()) << set->name << " c " << k.c;
      // The emulation sums the dequantized products in double: the same up to float rounding.
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - double(ref[i])));
      EXPECT_LE(worst, 1e-5) << set->name << " c " << k.c;
    }
  }
}

// One-channel stride-1 convolutions (the first layers of image models) run with output pixels
// across the lanes, and with the 2x2 pool that reads them, where a set has that path: every set
// gives the same bits as the portable im2col path, and the emulation's values to a float rounding.
TEST(Int8Cpu, OneChannelConvolutionsAndTheirPoolsGiveTheIm2colPathsBits) {
  using testing_support::ModelBuilder;
  struct Case {
    int h, w, oc;
    formats::Window2D win;
    OpType act, pool;
    bool conv_is_output;  // the pool cannot run in the convolution's step
    bool lanes = true;    // the path takes it (not where rows 10 bytes apart share a lane group: im2col)
  };
  const Case cases[] = {
      {28, 28, 6, window(5, 5, 1, 1, 2, 2, 2, 2), OpType::Relu, OpType::MaxPool, false},   // LeNet-5's c1
      {28, 28, 6, window(5, 5, 1, 1, 2, 2, 2, 2), OpType::Tanh, OpType::AvgPool, false},
      {13, 11, 5, window(3, 3, 1, 1, 1, 1, 1, 1), OpType::Tanh, OpType::MaxPool, false},   // odd sizes: last row, column dropped
      {9, 19, 17, window(4, 6, 1, 1, 0, 2, 1, 0), OpType::Relu, OpType::AvgPool, false},   // 17 channels, asymmetric pads
      {7, 40, 3, window(2, 9, 1, 1), OpType::Flatten, OpType::MaxPool, false},              // no activation, 3 tap groups
      {5, 20, 2, window(3, 11, 1, 1), OpType::Relu, OpType::MaxPool, false, false},
      {12, 12, 8, window(3, 3, 1, 1, 1, 1, 1, 1), OpType::Relu, OpType::MaxPool, true},
      {6, 6, 4, window(3, 3, 1, 1, 1, 1, 1, 1), OpType::Relu, OpType::AvgPool, false},
  };
  // Output planes larger than L2 (whole images: 32 x 256 x 256 floats, 8 MiB): im2col.
  {
    auto big = ModelBuilder("big", {1, 256, 256}).conv2d("c", "x", 1, 32, window(3, 3, 1, 1, 1, 1, 1, 1), 1)
                   .outputs({"c"}).build();
    big->calibration = input_range("x", 1.0);
    const std::string plan =
        cpu_with(gemm_sets().back().first)->compile(engine::plan_graph(big), int8_options())->plan_summary();
    EXPECT_NE(plan.find("0 one-channel convolutions"), std::string::npos) << plan;
  }
  uint32_t seed = 300;
  for (const Case& k : cases) {
    ModelBuilder b("plane", {1, k.h, k.w});
    b.conv2d("c", "x", 1, k.oc, k.win, seed++);
    std::string last = "c";
    if (k.act != OpType::Flatten) b.unary("a", k.act, "c"), last = "a";
    b.pool("p", k.pool, last, window(2, 2, 2, 2), false);
    auto m = (k.conv_is_output ? b.outputs({"p", last}) : b.outputs({"p"})).build();
    m->calibration = input_range("x", 0.9);
    for (const auto& [kernels, set] : gemm_sets()) {
      const std::string plan = cpu_with(kernels)->compile(engine::plan_graph(m), int8_options())->plan_summary();
      const bool lanes = set->plane_conv && k.lanes;
      EXPECT_NE(plan.find(lanes ? "1 one-channel convolutions" : "0 one-channel convolutions"), std::string::npos)
          << set->name << ": " << plan;
    }
    const int per = k.h * k.w;
    for (int n : {1, 3, 45}) {  // 45: more than one chunk of images, on two threads
      const auto x = testing_support::random_floats(size_t(n) * per, seed++);
      const auto want = testing_support::run_backend(m, *cpu_with(CpuOptions::Kernels::Portable), x.data(), n, n,
                                                     int8_options());
      const auto ref = testing_support::run_backend(m, "reference", x.data(), n, n, int8_options());
      for (const auto& [kernels, set] : gemm_sets()) {
        const auto got = testing_support::run_backend(m, *cpu_with(kernels), x.data(), n, n + 2, int8_options(2));
        for (size_t o = 0; o < got.size(); ++o) {
          ASSERT_EQ(got[o].size(), want[o].size());
          EXPECT_EQ(testing_support::first_bit_difference(got[o], want[o]), got[o].size())
              << set->name << " case " << k.h << "x" << k.w << " output " << o;
          for (size_t i = 0; i < got[o].size(); ++i)
            ASSERT_NEAR(got[o][i], ref[o][i], 1e-5) << set->name << " case " << k.h << "x" << k.w << " element " << i;
        }
      }
    }
  }
}

// A model with one quantized node followed by `rest`: every op checked against the emulation, with
// differences only from the last float rounding of the quantized node's sum (one quantization: no
// value can round to another q).
void expect_close_to_emulation(const std::shared_ptr<formats::Model>& m, int per_sample, uint32_t seed,
                               const std::string& what) {
  for (int n : {1, 2, 5, 37}) {
    const auto x = testing_support::random_floats(size_t(n) * per_sample, seed++);
    const auto ref = testing_support::run_backend(m, "reference", x.data(), n, n, int8_options());
    for (const auto& [kernels, set] : gemm_sets()) {
      const auto got = testing_support::run_backend(m, *cpu_with(kernels), x.data(), n, n + 3, int8_options(2));
      for (size_t o = 0; o < got.size(); ++o)
        for (size_t i = 0; i < got[o].size(); ++i)
          ASSERT_NEAR(got[o][i], ref[o][i], 1e-5) << what << " " << set->name << " batch " << n << " output " << o
                                                  << " element " << i;
    }
  }
}

TEST(Int8Cpu, EveryOpMatchesTheEmulation) {
  using testing_support::ModelBuilder;
  const auto w3 = window(3, 3, 1, 1, 1, 1, 1, 1);
  auto with_cal = [](std::shared_ptr<formats::Model> m) {
    m->calibration = input_range("x", 1.0);
    return m;
  };
  expect_close_to_emulation(with_cal(ModelBuilder("dense", {37}).dense("y", "x", 37, 21, 3).unary("p", OpType::Softmax, "y")
                                         .outputs({"p", "y"}).build()),
                            37, 10, "dense + softmax");
  expect_close_to_emulation(with_cal(ModelBuilder("relu", {3, 9, 7}).conv2d("c", "x", 3, 10, w3, 4)
                                         .unary("r", OpType::Relu, "c").outputs({"r"}).build()),
                            3 * 9 * 7, 20, "conv + relu (fused)");
  expect_close_to_emulation(with_cal(ModelBuilder("relu2", {3, 9, 7}).conv2d("c", "x", 3, 10, w3, 4)
                                         .unary("r", OpType::Relu, "c").outputs({"r", "c"}).build()),
                            3 * 9 * 7, 25, "conv + relu, both outputs (not fused)");
  expect_close_to_emulation(with_cal(ModelBuilder("acts", {2, 6, 5}).conv2d("c", "x", 2, 5, w3, 5)
                                         .unary("t", OpType::Tanh, "c").unary("s", OpType::Sigmoid, "c")
                                         .outputs({"t", "s"}).build()),
                            2 * 6 * 5, 30, "tanh, sigmoid");
  expect_close_to_emulation(with_cal(ModelBuilder("pools", {4, 11, 9}).conv2d("c", "x", 4, 6, w3, 6)
                                         .pool("mp", OpType::MaxPool, "c", window(2, 2, 2, 2))
                                         .pool("ap", OpType::AvgPool, "c", window(3, 3, 2, 2, 1, 1, 1, 1), false)
                                         .pool("gap", OpType::AvgPool, "c", window(11, 9, 1, 1))
                                         .pool("ap2", OpType::AvgPool, "c", window(2, 2, 2, 2))
                                         .pool("mp3", OpType::MaxPool, "c", window(3, 3, 2, 2, 0, 1, 0, 1))
                                         .outputs({"mp", "ap", "gap", "ap2", "mp3"}).build()),
                            4 * 11 * 9, 40, "maxpool, avgpool, global average pool");
  expect_close_to_emulation(with_cal(ModelBuilder("mix", {3, 8, 8}).conv2d("a", "x", 3, 5, w3, 7)
                                         .conv2d("b", "x", 3, 7, w3, 8).scale_shift("s", "a", 5, 9)
                                         .concat("cat", {"s", "b"}).add("sum", "a", "a")
                                         .unary("f", OpType::Flatten, "cat").unary("p", OpType::Softmax, "f")
                                         .outputs({"cat", "sum", "p"}).build()),
                            3 * 8 * 8, 50, "scale_shift, concat, add, flatten, softmax");
}

TEST(Int8Cpu, SameBitsForAnySplitThreadCountAndInstructionSet) {
  // Two quantized layers in a row, relu and tanh in their epilogues, and a dense layer after a
  // flatten (weights permuted to NHWC).
  using testing_support::ModelBuilder;
  auto base = ModelBuilder("deep", {3, 12, 10}).conv2d("c1", "x", 3, 8, window(3, 3, 1, 1, 1, 1, 1, 1), 1)
                  .unary("r1", OpType::Relu, "c1").pool("p1", OpType::MaxPool, "r1", window(2, 2, 2, 2))
                  .conv2d("c2", "p1", 8, 12, window(3, 3, 1, 1), 2).unary("t", OpType::Tanh, "c2")
                  .unary("f", OpType::Flatten, "t")
                  .dense("d", "f", 12 * 4 * 3, 10, 3).unary("p", OpType::Softmax, "d").outputs({"p"}).build();
  const int n = 41;
  const auto x = testing_support::random_floats(size_t(n) * 3 * 12 * 10, 99);
  const auto m = tc_test::calibrated(base, x.data(), n);
  const auto sets = gemm_sets();
  const auto whole = testing_support::run_backend(m, *cpu_with(sets.front().first), x.data(), n, n, int8_options(1))[0];
  for (const auto& [kernels, set] : sets)
    for (int threads : {1, 2, 3})
      for (int split : {1, 7, 41}) {
        auto cpu = cpu_with(kernels);
        engine::CompileOptions o = int8_options(threads);
        o.max_batch = split;
        const auto exe = cpu->compile(engine::plan_graph(m), o);
        std::vector<float> got(whole.size(), NAN);
        for (int first = 0; first < n; first += split) {
          float* out = got.data() + size_t(first) * 10;
          exe->run(x.data() + size_t(first) * 3 * 12 * 10, std::min(split, n - first), std::span<float* const>(&out, 1));
        }
        EXPECT_EQ(testing_support::first_bit_difference(got, whole), got.size())
            << set->name << " threads " << threads << " split " << split;
      }
  // Against the emulation: two quantizations, so a value may land on the neighbouring q; small.
  const auto ref = testing_support::run_backend(m, "reference", x.data(), n, n, int8_options())[0];
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(whole[i]) - double(ref[i])));
  EXPECT_LE(worst, 2e-2);
}

// Every image through one executable in batches of up to 1,024, outputs poisoned.
std::vector<float> run_in_batches(engine::Backend& backend, const std::shared_ptr<formats::Model>& m,
                                  const formats::ImageBatch& images, engine::CompileOptions o) {
  o.max_batch = 1024;
  const auto exe = backend.compile(engine::plan_graph(m), o);
  const size_t classes = size_t(engine::plan_graph(m).output_elements(0));
  const size_t per = size_t(images.channels) * images.height * images.width;
  std::vector<float> out(size_t(images.count) * classes, NAN);
  for (int64_t first = 0; first < images.count; first += o.max_batch) {
    float* y = out.data() + size_t(first) * classes;
    exe->run(images.pixels.data() + size_t(first) * per, int(std::min<int64_t>(o.max_batch, images.count - first)),
             std::span<float* const>(&y, 1));
  }
  return out;
}

// LeNet-5 and seed002-cnn on the MNIST test set, calibrated on its first 1,000 images (the tests have
// no training set): every image the same class as the reference's int8 emulation, max |dp| small,
// and within int8's stated bound of fp32 (<= 1 % of classes changed).
TEST(Int8Cpu, MnistModelsAgreeWithTheEmulation) {
  const std::string path = std::string(ENGINE_TEST_DATA_DIR) + "/mnist/t10k-images-idx3-ubyte.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  const auto images = formats::read_idx_images(path);
  const int n = int(images.count);
  for (const char* name : {"lenet5", "seed002-cnn"}) {
    const std::string file = std::string(ENGINE_SOURCE_DIR) + "/models/" + name + ".json";
    if (!std::filesystem::exists(file)) GTEST_SKIP() << file << " not found";
    const auto m = tc_test::calibrated(std::make_shared<formats::Model>(formats::load_model(file)), images.pixels.data(), 1000);
    auto cpu = engine::cpu::make_cpu_backend();
    auto reference = engine::BackendRegistry::instance().create("reference");
    const auto got = run_in_batches(*cpu, m, images, int8_options(0));
    engine::CompileOptions fp32_options;
    const auto fp32 = run_in_batches(*cpu, m, images, fp32_options);
    const auto emu = run_in_batches(*reference, m, images, int8_options(0));
    const size_t classes = got.size() / size_t(n);
    int same_emu = 0, same_fp32 = 0;
    double worst = 0;
    for (int s = 0; s < n; ++s) {
      auto argmax = [&](const std::vector<float>& v) {
        return std::max_element(v.begin() + s * classes, v.begin() + (s + 1) * classes) - v.begin();
      };
      same_emu += argmax(got) == argmax(emu);
      same_fp32 += argmax(got) == argmax(fp32);
      for (size_t k = s * classes; k < (s + 1) * classes; ++k)
        worst = std::max(worst, std::fabs(double(got[k]) - double(emu[k])));
    }
    EXPECT_EQ(same_emu, n) << name;
    EXPECT_LE(worst, 2e-2) << name;
    EXPECT_GE(same_fp32, int(0.99 * n)) << name;
    std::cout << "[ measured ] cpu int8 " << name << ": same class as the emulation " << same_emu << " of " << n
              << ", max |dp| " << worst << "; same class as fp32 " << same_fp32 << "\n";
  }
}

TEST(Int8Cpu, RefusalsNameTheProblem) {
  auto m = testing_support::ModelBuilder("d", {6}).dense("fc", "x", 6, 3, 21).outputs({"fc"}).build();
  auto cpu = engine::cpu::make_cpu_backend();
  auto expect_refusal = [&](const std::string& text) {
    try {
      cpu->compile(engine::plan_graph(m), int8_options());
      ADD_FAILURE() << "compiled";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_refusal("model 'd' has no calibration data, which int8 needs: run engine calibrate");
  m->calibration = input_range("fc", 1.0);  // not the dense node's input
  expect_refusal("its calibration has no range for 'x', the input of a dense node");
}

}  // namespace

// The custom backend's fp16 / bf16 / int8 path, the tensor-core chain (engine/custom/fused/tc_*):
// every member of tests/gpu/custom_tc_util.hpp's spread against the reference backend's emulation of
// the same precision on fresh random inputs with poisoned outputs (int8: calibrated on them), both
// kernel versions, both tanh variants, the generic kernel and fixed tiles; the same bits for any batch
// split, run to run, and past 65,535 images; the refusals; LeNet-5 on MNIST against fp32 (and int8
// against its emulation) with the bounds docs/design/precision.md states.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/custom/custom_backend.hpp"
#include "engine/gpu/precision_choice.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/custom_tc_util.hpp"
#include "tests/gpu/gpu_op_test_util.hpp"
#include "tests/gpu/mnist_model_util.hpp"

namespace {

using formats::OpType;

// The custom backend with the tensor-core chain's choices `tc`, running exactly the precision asked
// (the default would time the precisions it allows and might run fp32: custom_precision_choice_test.cpp).
// Convolutions outside the family go to the per-node path, whose texts Refusals checks (the
// tensor-core general path's own: custom_tc_general_test.cpp).
std::unique_ptr<engine::Backend> custom_backend(const engine::custom::TcChainOptions& tc = {}) {
  engine::custom::CustomOptions options;
  options.tc = tc;
  options.tc_general.convolutions = false;
  options.precision_choice = engine::gpu::PrecisionChoice::AsAsked;
  return engine::custom::make_custom_backend(options);
}

// The kernel's other variants, each named for the test output.
struct TcVariant {
  const char* name;
  engine::custom::TcChainOptions tc;
};
TcVariant variant(const char* name, bool engine::custom::TcChainOptions::*field) {
  TcVariant v{name, {}};
  v.tc.*field = true;
  return v;
}

engine::CompileOptions with(engine::Precision p) {
  engine::CompileOptions o;
  o.precision = p;
  return o;
}

std::vector<float> input_for(const std::shared_ptr<formats::Model>& model, int n, uint32_t seed) {
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  if (model->input.dtype == formats::InputDType::UInt8) {
    const auto bytes = testing_support::random_bytes(per_sample * size_t(n), seed);
    std::vector<float> packed((bytes.size() + 3) / 4);
    std::memcpy(packed.data(), bytes.data(), bytes.size());
    return packed;
  }
  return testing_support::random_floats(per_sample * size_t(n), seed, -1.0f, 1.0f);
}

// The reference's emulation stores every value in the format, pre-activation sums included (the
// kernel: only what it hands from layer to layer, and tanh.approx where the reference has tanh), so
// the two differ by a few units of the format's last place in every activation, and a sum of ~100
// such terms that cancels (a tanh output near 0, no softmax: sigmoid_full_no_softmax) carries them
// at 1 % of the output's peak, where compare_with_cpu's relative measure has its floor. Measured
// worst (docs/design/custom-tensor-core.md): fp16 7.7e-3 on that model, <= 7e-4 on the others; bf16 6.6e-2, <= 4.5e-3.
// Bounds: 2e-2 (fp16) and 1e-1 (bf16); an indexing or layout bug shows as errors near 1.
double tolerance(engine::Precision p) { return p == engine::Precision::BF16 ? 1e-1 : 2e-2; }

void expect_matches_emulation(const std::shared_ptr<formats::Model>& model, engine::Precision p, uint32_t seed,
                              const engine::custom::TcChainOptions& tc = {}) {
  double worst = 0;
  const auto backend = custom_backend(tc);
  for (const auto& bc : gpu_test::batch_cases()) {
    const auto input = input_for(model, bc.batch, seed + uint32_t(bc.batch));
    const auto r = testing_support::compare_with_cpu(model, *backend, input.data(), bc.batch, bc.max_batch, with(p));
    EXPECT_EQ(r.unwritten, 0u) << "batch " << bc.batch;
    EXPECT_LE(r.max_rel_error, tolerance(p)) << "batch " << bc.batch << ", worst " << r.worst;
    worst = std::max(worst, r.max_rel_error);
  }
  std::cout << "[ measured ] custom " << engine::precision_name(p) << " " << model->name
            << ": max relative error against the emulation " << worst << "\n";
}

TEST(CustomTcChain, MatchesReferenceEmulation) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (const engine::Precision p : {engine::Precision::FP16, engine::Precision::BF16})
    for (auto f : tc_test::families()) {
      SCOPED_TRACE(std::string(engine::precision_name(p)) + " " + f.name);
      expect_matches_emulation(tc_test::family_model(f), p, 7000 + f.seed);
      f.conv_pad = true;  // [1, 28, 28] that c1 pads by 2 (the zoo's LeNet-5s)
      expect_matches_emulation(tc_test::family_model(f), p, 7050 + f.seed);
      f.conv_pad = false;
      f.uint8 = true;  // the same member behind uint8 pixels padded by 2 (LeNet-5's input)
      f.name += "_uint8";
      expect_matches_emulation(tc_test::family_model(f), p, 7100 + f.seed);
    }
}

// Version 1 (the simple kernel), the accurate tanhf, the generic kernel and tiles of 16 at every
// batch: the same bounds.
TEST(CustomTcChain, OtherVersionsMatchReferenceEmulation) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  using O = engine::custom::TcChainOptions;
  for (const TcVariant& v : {variant("one warp per tile", &O::one_warp_per_tile), variant("accurate tanh", &O::accurate_tanh),
                             variant("generic kernel", &O::generic_kernel), variant("fixed tiles", &O::fixed_tiles)}) {
    for (const auto& f : tc_test::families()) {
      SCOPED_TRACE(std::string(v.name) + " " + f.name);
      expect_matches_emulation(tc_test::family_model(f), engine::Precision::FP16, 7200 + f.seed, v.tc);
    }
  }
}

// Each image's values depend only on its own rows of the GEMMs: one batch of 1,000 and the same
// images in batches of 1, 15, 16, 17 and 951 give the same bits, and so does a second run.
TEST(CustomTcChain, SameBitsForAnyBatchSplit) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const auto model = tc_test::family_model(tc_test::families()[0]);
  const int n = 1000;
  const auto input = input_for(model, n, 7300);
  const auto whole = testing_support::run_backend(model, *custom_backend(), input.data(), n, n, with(engine::Precision::FP16)).at(0);
  const auto again = testing_support::run_backend(model, *custom_backend(), input.data(), n, n, with(engine::Precision::FP16)).at(0);
  EXPECT_EQ(std::memcmp(whole.data(), again.data(), whole.size() * sizeof(float)), 0) << "not repeatable";
  const size_t units = whole.size() / n;
  // The generic kernel (activations read from the parameters) and tiles of 16 at every batch: the
  // same operations in the same order, so the same bits.
  using O = engine::custom::TcChainOptions;
  for (const TcVariant& v : {variant("generic kernel", &O::generic_kernel), variant("fixed tiles", &O::fixed_tiles)}) {
    const auto other =
        testing_support::run_backend(model, *custom_backend(v.tc), input.data(), n, n, with(engine::Precision::FP16)).at(0);
    EXPECT_EQ(std::memcmp(whole.data(), other.data(), whole.size() * sizeof(float)), 0) << v.name;
  }
  int start = 0;
  for (int b : {1, 15, 16, 17, 951}) {
    const auto part = testing_support::run_backend(model, *custom_backend(), input.data() + size_t(start) * 1024, b, 1000,
                                                   with(engine::Precision::FP16)).at(0);
    EXPECT_EQ(std::memcmp(part.data(), whole.data() + size_t(start) * units, part.size() * sizeof(float)), 0)
        << "images " << start << ".." << start + b - 1;
    start += b;
  }
}

// Past 65,535 images (one grid loops over 16-image groups): every output written, the last images
// the same bits as when run alone.
TEST(CustomTcChain, HugeBatch) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  if (gpu_test::sanitizer_run()) GTEST_SKIP() << "too slow under compute-sanitizer";
  const auto model = tc_test::family_model(tc_test::families()[1]);
  for (const auto& bc : gpu_test::huge_batch_cases()) {
    const auto input = input_for(model, bc.batch, 7400);
    const auto all = testing_support::run_backend(model, *custom_backend(), input.data(), bc.batch, bc.max_batch,
                                                  with(engine::Precision::FP16)).at(0);
    size_t nan = 0;
    for (float v : all) nan += std::isnan(v);
    EXPECT_EQ(nan, 0u) << "batch " << bc.batch;
    const int tail = 37;
    const size_t units = all.size() / size_t(bc.batch);
    const auto last = testing_support::run_backend(model, *custom_backend(), input.data() + size_t(bc.batch - tail) * 1024,
                                                   tail, tail, with(engine::Precision::FP16)).at(0);
    EXPECT_EQ(std::memcmp(last.data(), all.data() + size_t(bc.batch - tail) * units, last.size() * sizeof(float)), 0)
        << "batch " << bc.batch;
  }
}

// A [1, 28, 28] input that c1 pads by 2 (the zoo's LeNet-5s: uint8 pixels, preprocessed, then the
// padded convolution) runs the chain, which stages it with zeros around it: the same bits as the same
// model with the padding in its preprocessing (models/lenet5.json's way), for float input as for
// uint8, fp16, bf16 and int8 (the same calibration), both kernel versions; the plan says so.
TEST(CustomTcChain, PaddedInputSameBitsAsPaddedModel) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  using O = engine::custom::TcChainOptions;
  for (const engine::Precision p : {engine::Precision::FP16, engine::Precision::BF16, engine::Precision::INT8})
    for (const bool u8 : {true, false})
      for (const TcVariant& v : {TcVariant{"version 2", {}}, variant("version 1", &O::one_warp_per_tile)}) {
        tc_test::Family f = tc_test::families()[u8 ? 0 : 1];
        f.uint8 = u8;
        f.conv_pad = true;
        SCOPED_TRACE(f.name + (u8 ? " uint8 " : " float ") + engine::precision_name(p) + " " + v.name);
        for (const int n : {1, 37, 1000}) {
          const auto input = input_for(tc_test::family_model(f), n, 7700 + uint32_t(n));
          auto padded = tc_test::family_model(f);
          f.conv_pad = false;
          auto unpadded = tc_test::family_model(f);
          f.conv_pad = true;
          if (p == engine::Precision::INT8) {
            padded = tc_test::calibrated(padded, input.data(), n);
            unpadded->calibration = padded->calibration;  // the same names, the same ranges
          }
          const auto backend = custom_backend(v.tc);
          engine::CompileOptions o = with(p);
          o.max_batch = n;
          const auto exe = backend->compile(engine::plan_graph(padded), o);
          EXPECT_NE(exe->plan_summary().find("input 28x28 zero-padded by 2 to 32x32 while staged"), std::string::npos)
              << exe->plan_summary();
          const auto got = testing_support::run_backend(padded, *backend, input.data(), n, n, with(p)).at(0);
          const auto unpadded_input = u8 ? input : tc_test::padded_images(input, n);
          const auto want =
              testing_support::run_backend(unpadded, *backend, unpadded_input.data(), n, n, with(p)).at(0);
          ASSERT_EQ(got.size(), want.size());
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "batch " << n;
        }
      }
}

std::string compile_error(const std::shared_ptr<formats::Model>& model, engine::CompileOptions options) {
  auto backend = custom_backend();
  try {
    backend->compile(engine::plan_graph(model), options);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string path_of(const std::shared_ptr<formats::Model>& model, engine::CompileOptions options) {
  auto backend = custom_backend();
  options.max_batch = 16;
  return backend->compile(engine::plan_graph(model), options)->execution_path();
}

// A model outside the family and --no-fuse take the per-node tensor-core path (custom_tc_pernode_test.cpp),
// whose path text says why the chain does not run; int8 without calibration (or a range) is refused.
TEST(CustomTcChain, Refusals) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  tc_test::Family wide;
  wide.c1 = 9;
  std::string why = path_of(tc_test::family_model(wide), with(engine::Precision::FP16));
  EXPECT_NE(why.find("per-node kernels, conv2d and dense on tensor cores in fp16"), std::string::npos) << why;
  EXPECT_NE(why.find("node 'c1' (conv2d): 9 output channels; the family's first convolution has at most 8"),
            std::string::npos) << why;
  auto model = testing_support::ModelBuilder("mlp", {1, 32, 32})
                   .unary("f", OpType::Flatten, "x")
                   .dense("d", "f", 1024, 10, 3)
                   .unary("s", OpType::Softmax, "d")
                   .outputs({"s"})
                   .build();
  why = path_of(model, with(engine::Precision::BF16));
  EXPECT_NE(why.find("node 'f' (flatten) where the family has a 5x5 convolution (conv2d)"), std::string::npos) << why;
  engine::CompileOptions no_fuse = with(engine::Precision::FP16);
  no_fuse.fuse = false;
  why = path_of(tc_test::family_model(tc_test::Family{}), no_fuse);
  EXPECT_NE(why.find("--no-fuse"), std::string::npos) << why;
  why = compile_error(tc_test::family_model(tc_test::Family{}), with(engine::Precision::INT8));
  EXPECT_NE(why.find("model 'tc_family' has no calibration data, which int8 needs: run engine calibrate"),
            std::string::npos) << why;
  auto partial = tc_test::family_model(tc_test::Family{});
  formats::Calibration cal;
  cal.method = "max";
  cal.ranges = {{"x", 1.0}, {"p1", 1.0}};
  partial->calibration = cal;
  why = compile_error(partial, with(engine::Precision::INT8));
  EXPECT_NE(why.find("its calibration has no range for 'flat', the input of node 'f5' (dense)"), std::string::npos)
      << why;
}

// int8 against the reference's int8 emulation, each member calibrated on its inputs (tc_test::calibrated,
// engine calibrate's max method). The same quantization on both sides, but a value that lands within
// an ulp or two of a rounding boundary (fp32 sums against double, x * (1 / s) against x / s,
// tanh.approx) can take the neighbouring step, 1/127 of its range: in a softmax's probabilities that
// stays under 1 % (measured: <= 1.6e-2); a tanh output that cancels toward 0 without a
// softmax (sigmoid_full_no_softmax) carries a few such steps at 1 % of the peak, where
// compare_with_cpu's relative measure has its floor (0.17). Bound 0.25; an indexing or layout bug
// shows as errors near 1, and Lenet5Int8OnMnist holds the kernel to the emulation on real data.
TEST(CustomTcChain, Int8MatchesReferenceEmulation) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (const bool accurate : {false, true}) {
    engine::custom::TcChainOptions tc;
    tc.accurate_tanh = accurate;
    const auto backend = custom_backend(tc);
    for (auto f : tc_test::families())
      for (bool u8 : {false, true}) {
        f.uint8 = u8;
        SCOPED_TRACE(f.name + (u8 ? " uint8" : "") + " accurate tanh " + (accurate ? "1" : "0"));
        double worst = 0;
        for (const auto& bc : gpu_test::batch_cases()) {
          const auto input = input_for(tc_test::family_model(f), bc.batch, 7500 + f.seed + uint32_t(bc.batch));
          const auto model = tc_test::calibrated(tc_test::family_model(f), input.data(), bc.batch);
          const auto r = testing_support::compare_with_cpu(model, *backend, input.data(), bc.batch, bc.max_batch,
                                                           with(engine::Precision::INT8));
          EXPECT_EQ(r.unwritten, 0u) << "batch " << bc.batch;
          EXPECT_LE(r.max_rel_error, 0.25) << "batch " << bc.batch << ", worst " << r.worst;
          worst = std::max(worst, r.max_rel_error);
        }
        std::cout << "[ measured ] custom int8 " << f.name << (u8 ? "_uint8" : "") << " (accurate tanh " << accurate
                  << "): max relative error against the emulation " << worst << "\n";
      }
  }
}

// int8: the same bits for any batch split and run to run, as the 16-bit chain.
TEST(CustomTcChain, Int8SameBitsForAnyBatchSplit) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const int n = 1000;
  const auto input = input_for(tc_test::family_model(tc_test::families()[1]), n, 7600);
  const auto model = tc_test::calibrated(tc_test::family_model(tc_test::families()[1]), input.data(), n);
  const auto opts = with(engine::Precision::INT8);
  const auto whole = testing_support::run_backend(model, *custom_backend(), input.data(), n, n, opts).at(0);
  const auto again = testing_support::run_backend(model, *custom_backend(), input.data(), n, n, opts).at(0);
  EXPECT_EQ(std::memcmp(whole.data(), again.data(), whole.size() * sizeof(float)), 0) << "not repeatable";
  const size_t units = whole.size() / n;
  int start = 0;
  for (int b : {1, 15, 16, 17, 951}) {
    const auto part =
        testing_support::run_backend(model, *custom_backend(), input.data() + size_t(start) * 1024, b, 1000, opts).at(0);
    EXPECT_EQ(std::memcmp(part.data(), whole.data() + size_t(start) * units, part.size() * sizeof(float)), 0)
        << "images " << start << ".." << start + b - 1;
    start += b;
  }
}

// LeNet-5 on MNIST in fp16 and bf16 against fp32 (the reference): >= 99.9 % the same class, max |dp|
// within 1e-2 (fp16) / 5e-2 (bf16), bitwise the same on a second run; the plan names the path.
TEST(CustomTcChain, Lenet5OnMnist) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const auto& images = gpu_test::mnist_images();
  if (images.count == 0) GTEST_SKIP() << gpu_test::mnist_images_path() << " not found";
  auto model = testing_support::lenet5_model();
  if (!model) GTEST_SKIP() << "models/lenet5.json not found";
  const size_t classes = size_t(engine::plan_graph(model).output_elements(0));
  const auto ref = gpu_test::run_all("reference", model, images, 1024);
  for (const auto& [p, max_dp] : {std::pair{engine::Precision::FP16, 1e-2}, std::pair{engine::Precision::BF16, 5e-2}}) {
    SCOPED_TRACE(engine::precision_name(p));
    std::string summary;
    const auto got = gpu_test::run_all(*custom_backend(), model, images, 1024, with(p), &summary);
    const auto again = gpu_test::run_all(*custom_backend(), model, images, 1024, with(p));
    const auto a = gpu_test::agreement(got, ref, classes);
    EXPECT_EQ(a.nan, 0u);
    EXPECT_GE(double(a.argmax_same), 0.999 * double(a.samples));
    EXPECT_LE(a.max_abs, max_dp);
    EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "not bitwise repeatable";
    EXPECT_NE(summary.find("path: tensor-core chain"), std::string::npos) << summary;
    std::cout << "[ measured ] custom " << engine::precision_name(p) << " lenet5: same class " << a.argmax_same
              << " of " << a.samples << ", max |dp| " << a.max_abs << "\n"
              << summary << "\n";
  }
}

// LeNet-5 on MNIST in int8, calibrated on the first 1,000 test images (the tests have no training
// set; engine calibrate uses training images): >= 99.5 % the same class as fp32, max |dp| <= 0.25 (the
// reference's int8 emulation, calibrated on training images: 0.02 % changed, 5.5e-2), bitwise
// repeatable, and within 2e-2 of the reference's own int8 emulation.
TEST(CustomTcChain, Lenet5Int8OnMnist) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const auto& images = gpu_test::mnist_images();
  if (images.count == 0) GTEST_SKIP() << gpu_test::mnist_images_path() << " not found";
  auto base = testing_support::lenet5_model();
  if (!base) GTEST_SKIP() << "models/lenet5.json not found";
  const int cal_images = int(std::min<int64_t>(1000, images.count));
  const auto model = tc_test::calibrated(base, images.pixels.data(), cal_images);
  const size_t classes = size_t(engine::plan_graph(model).output_elements(0));
  const auto ref = gpu_test::run_all("reference", model, images, 1024);
  std::string summary;
  const auto got = gpu_test::run_all(*custom_backend(), model, images, 1024, with(engine::Precision::INT8), &summary);
  const auto again = gpu_test::run_all(*custom_backend(), model, images, 1024, with(engine::Precision::INT8));
  const auto a = gpu_test::agreement(got, ref, classes);
  EXPECT_EQ(a.nan, 0u);
  EXPECT_GE(double(a.argmax_same), 0.995 * double(a.samples));
  EXPECT_LE(a.max_abs, 0.25);
  EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "not bitwise repeatable";
  EXPECT_NE(summary.find("int8 operands"), std::string::npos) << summary;
  const auto emu = gpu_test::run_all("reference", model, images, 1024, with(engine::Precision::INT8));
  const auto e = gpu_test::agreement(got, emu, classes);
  // Against the reference's int8 emulation of the same calibrated model: rare one-step differences
  // only (measured: every class the same, max |dp| 5.2e-3).
  EXPECT_GE(double(e.argmax_same), 0.999 * double(e.samples));
  EXPECT_LE(e.max_abs, 2e-2);
  std::cout << "[ measured ] custom int8 lenet5: same class as fp32 " << a.argmax_same << " of " << a.samples
            << ", max |dp| " << a.max_abs << "; against the reference's int8 emulation: same class " << e.argmax_same
            << ", max |dp| " << e.max_abs << "\n"
            << summary << "\n";
}

}  // namespace

// --backend=cudnn on whole models: LeNet-5 (models/lenet5.json) on the MNIST test set against the CPU
// reference, bitwise determinism, the TF32 option's documented accuracy, the plan summary and the
// registry entry. A LeNet-shaped model built in code (uint8 input, preprocessing with padding, every
// op kind, a fused conv+relu) runs the same checks when lenet5.json is not there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/idx.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/cudnn_test_util.hpp"
#include "tests/gpu/mnist_model_util.hpp"

namespace {

using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;

// TF32 (Precision::TF32) rounds convolution and dense inputs to a 10-bit mantissa: documented bound on
// LeNet-5's probabilities against the fp32 CPU reference, and the share of images whose class must agree.
// On models/lenet5 with MNIST t10k, TF32 moves probabilities by about 1e-3 at most and keeps every
// image's class; 2e-3 keeps a 2x margin.
constexpr double kTf32ProbabilityTolerance = 2e-3;
constexpr double kTf32MinArgmaxAgreement = 0.999;

// Relu after the second convolution (cuDNN fuses it into the convolution), sigmoid after dense 84.
std::shared_ptr<formats::Model> lenet_like_model() {
  testing_support::LenetLike o;
  o.act3 = OpType::Relu;
  o.act6 = OpType::Sigmoid;
  return testing_support::lenet_like_model(o);
}

using gpu_test::agreement;
using gpu_test::mnist_images;
using gpu_test::mnist_images_path;
using gpu_test::run_all;

void check_model_on_mnist(const std::shared_ptr<formats::Model>& model, bool require_same_class) {
  const auto& images = mnist_images();
  if (images.count == 0) GTEST_SKIP() << mnist_images_path() << " not found";
  const size_t classes = size_t(engine::plan_graph(model).output_elements(0));
  const int max_batch = 1024;  // 10000 images: 9 full batches and a partial one of 784
  const auto ref = run_all("reference", model, images, max_batch);
  std::string summary;
  const auto got = run_all("cudnn", model, images, max_batch, {}, &summary);
  const auto a = agreement(got, ref, classes);
  EXPECT_EQ(a.nan, 0u);
  EXPECT_LE(a.max_abs, 1e-5) << "largest |p_cudnn - p_cpu| over " << a.samples << " images";
  if (require_same_class) {
    EXPECT_EQ(a.argmax_same, a.samples) << "images classified differently from cpu";
  }
  std::cout << "[ cudnn    ] " << model->name << ": " << a.samples << " images, max |dp| " << a.max_abs
            << ", same class " << a.argmax_same << "\n"
            << summary;
}

TEST(CudnnLenet5, MatchesCpuOnMnist) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  ENGINE_LOAD_LENET5_OR_SKIP(model);
  check_model_on_mnist(model, true);
}

TEST(CudnnLenetLike, MatchesCpuOnMnist) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  // Random weights: classes may tie to within rounding, so only the probabilities are compared.
  check_model_on_mnist(lenet_like_model(), false);
}

std::shared_ptr<formats::Model> lenet5_or_like() {
  auto model = testing_support::lenet5_model();
  return model ? model : lenet_like_model();
}

// Deterministic algorithms (the default): two runs of one executable, and a second compile of the
// same model, give the same bits.
TEST(CudnnDeterminism, RunsAreBitwiseIdentical) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  const auto images = gpu_test::first_images(mnist_images(), 2000);
  if (images.count == 0) GTEST_SKIP() << mnist_images_path() << " not found";
  const auto model = lenet5_or_like();
  const engine::Graph graph = engine::plan_graph(model);
  auto backend = engine::BackendRegistry::instance().create("cudnn");
  engine::CompileOptions options;
  options.max_batch = 256;
  ASSERT_TRUE(options.deterministic);
  auto first = run_all("cudnn", model, images, 256, options);
  auto second = run_all("cudnn", model, images, 256, options);  // a fresh compile
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float)))
      << "two deterministic compiles differ";

  // One executable, the same batch twice (and another batch size in between).
  auto exe = backend->compile(graph, options);
  const size_t classes = size_t(graph.output_elements(0));
  std::vector<float> a(classes * 256), b(classes * 256), c(classes * 7);
  float* pa[] = {a.data()};
  float* pb[] = {b.data()};
  float* pc[] = {c.data()};
  exe->run(images.pixels.data(), 256, pa);
  exe->run(images.pixels.data(), 7, pc);
  exe->run(images.pixels.data(), 256, pb);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "two runs differ";
}

TEST(CudnnTf32, StaysWithinDocumentedBound) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  const auto& images = mnist_images();
  if (images.count == 0) GTEST_SKIP() << mnist_images_path() << " not found";
  auto model = testing_support::lenet5_model();
  const bool real = model != nullptr;
  if (!real) model = lenet_like_model();
  const size_t classes = size_t(engine::plan_graph(model).output_elements(0));
  const auto ref = run_all("reference", model, images, 1024);
  engine::CompileOptions options;
  options.precision = engine::Precision::TF32;
  std::string summary;
  const auto got = run_all("cudnn", model, images, 1024, options, &summary);
  const auto a = agreement(got, ref, classes);
  EXPECT_EQ(a.nan, 0u);
  EXPECT_LE(a.max_abs, kTf32ProbabilityTolerance);
  if (real) {
    EXPECT_GE(double(a.argmax_same), kTf32MinArgmaxAgreement * double(a.samples));
  }
  EXPECT_NE(summary.find("TF32"), std::string::npos) << summary;
  std::cout << "[ cudnn    ] TF32 " << model->name << ": max |dp| " << a.max_abs << ", same class "
            << a.argmax_same << " of " << a.samples << "\n"
            << summary;
}

TEST(CudnnPlan, SummaryNamesAlgorithmsAndWorkspace) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  const auto model = lenet_like_model();
  const engine::Graph graph = engine::plan_graph(model);
  auto backend = engine::BackendRegistry::instance().create("cudnn");
  engine::CompileOptions options;
  options.max_batch = 256;  // space-to-depth convolutions from 256 images on
  auto exe = backend->compile(graph, options);
  const std::string summary = exe->plan_summary();
  EXPECT_NE(summary.find("node 'c1' (conv2d): CUDNN_CONVOLUTION_FWD_ALGO_"), std::string::npos) << summary;
  EXPECT_NE(summary.find("node 'c3' (conv2d): CUDNN_CONVOLUTION_FWD_ALGO_"), std::string::npos) << summary;
  // c1 (6 channels) and c3 (16) take the space-to-depth path, each with its activation fused.
  EXPECT_NE(summary.find("node 'c1' (conv2d): space-to-depth 2x2 ([1, 32, 32] -> [4, 16, 16], 3x3 kernel, 24 output "
                         "channels; copies by cudnnAddTensor), 't1' fused"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("'a3' fused into the depth-to-space"), std::string::npos) << summary;
  EXPECT_NE(summary.find("deterministic"), std::string::npos) << summary;
  EXPECT_NE(summary.find("FMA math"), std::string::npos) << summary;
  EXPECT_NE(summary.find("workspace"), std::string::npos) << summary;

  engine::CompileOptions fast = options;
  fast.deterministic = false;
  const std::string measured = backend->compile(graph, fast)->plan_summary();
  EXPECT_NE(measured.find("measured"), std::string::npos) << measured;
  std::cout << measured;
}

TEST(CudnnRegistry, EntryAndDescription) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  const engine::BackendEntry* entry = engine::BackendRegistry::instance().find("cudnn");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->priority, 10);
  auto backend = entry->create();
  EXPECT_EQ(backend->name(), "cudnn");
  const std::string d = backend->description();
  EXPECT_NE(d.find("cuDNN 9."), std::string::npos) << d;
  EXPECT_NE(d.find("cuBLAS"), std::string::npos) << d;
}

}  // namespace

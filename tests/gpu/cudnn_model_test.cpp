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

namespace {

using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;

// TF32 (Precision::TF32) rounds convolution and dense inputs to a 10-bit mantissa: documented bound on
// LeNet-5's probabilities against the fp32 CPU reference, and the share of images whose class must agree.
// Measured on an H100 (cuDNN 9.14, cuBLAS 13.1) with models/lenet5 on MNIST t10k: max |dp| 1.02e-3,
// same class on 10,000 of 10,000 images; 2e-3 keeps a 2x margin.
constexpr double kTf32ProbabilityTolerance = 2e-3;
constexpr double kTf32MinArgmaxAgreement = 0.999;

std::string mnist_images_path() { return std::string(ENGINE_TEST_DATA_DIR) + "/mnist/t10k-images-idx3-ubyte.gz"; }

// The MNIST test images (fewer under compute-sanitizer), or an empty batch when the file is missing.
formats::ImageBatch mnist_images() {
  formats::ImageBatch images;
  if (!std::filesystem::exists(mnist_images_path())) return images;
  images = formats::read_idx_images(mnist_images_path());
  const int64_t keep = cudnn_test::sanitizer_run() ? 512 : images.count;
  images.count = std::min(images.count, keep);
  images.pixels.resize(size_t(images.count) * size_t(images.channels * images.height * images.width));
  return images;
}

// A LeNet-5-shaped model with random weights: uint8 28x28 input padded to 32x32 by preprocessing,
// conv → tanh → avgpool → conv → relu (fused) → maxpool → flatten → dense → relu → dense → sigmoid →
// dense → softmax.
std::shared_ptr<formats::Model> lenet_like_model() {
  formats::Preprocess pre;
  pre.scale = 1.0f / 255.0f;
  pre.mean = {0.1307f};
  pre.std = {0.3081f};
  pre.pad_top = pre.pad_bottom = pre.pad_left = pre.pad_right = 2;
  return ModelBuilder("lenet_like", {1, 32, 32})
      .uint8_input({1, 28, 28}, pre)
      .conv2d("c1", "x", 1, 6, window(5, 5, 1, 1), 1)
      .unary("t1", OpType::Tanh, "c1")
      .pool("s2", OpType::AvgPool, "t1", window(2, 2, 2, 2))
      .conv2d("c3", "s2", 6, 16, window(5, 5, 1, 1), 2)
      .unary("r3", OpType::Relu, "c3")
      .pool("s4", OpType::MaxPool, "r3", window(2, 2, 2, 2))
      .unary("flat", OpType::Flatten, "s4")
      .dense("f5", "flat", 400, 120, 3)
      .unary("r5", OpType::Relu, "f5")
      .dense("f6", "r5", 120, 84, 4)
      .unary("g6", OpType::Sigmoid, "f6")
      .dense("f7", "g6", 84, 10, 5)
      .unary("prob", OpType::Softmax, "f7")
      .outputs({"prob"})
      .build();
}

// Runs every image through one executable in batches of `max_batch` (the last one partial) and
// returns the first output, [count, elements].
std::vector<float> run_all(const std::string& backend_name, const std::shared_ptr<formats::Model>& model,
                           const formats::ImageBatch& images, int max_batch, const engine::CompileOptions& base = {},
                           std::string* summary = nullptr) {
  const engine::Graph graph = engine::plan_graph(model);
  auto backend = engine::BackendRegistry::instance().create(backend_name);
  engine::CompileOptions options = base;
  options.max_batch = max_batch;
  auto exe = backend->compile(graph, options);
  if (summary) *summary = exe->plan_summary();
  const size_t per_image = size_t(images.channels * images.height * images.width);
  std::vector<std::vector<float>> outputs(graph.outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    outputs[i].assign(size_t(graph.output_elements(i)) * size_t(max_batch), std::nanf(""));
  std::vector<float*> pointers;
  for (auto& o : outputs) pointers.push_back(o.data());
  const size_t out0 = size_t(graph.output_elements(0));
  std::vector<float> result(out0 * size_t(images.count));
  for (int64_t start = 0; start < images.count; start += max_batch) {
    const int n = int(std::min<int64_t>(max_batch, images.count - start));
    exe->run(images.pixels.data() + size_t(start) * per_image, n, pointers);
    std::copy(outputs[0].begin(), outputs[0].begin() + ptrdiff_t(out0 * size_t(n)), result.begin() + ptrdiff_t(out0 * size_t(start)));
  }
  return result;
}

struct Agreement {
  double max_abs = 0;
  size_t nan = 0, argmax_same = 0, samples = 0;
};

Agreement agreement(const std::vector<float>& got, const std::vector<float>& ref, size_t classes) {
  Agreement a;
  a.samples = ref.size() / classes;
  for (size_t s = 0; s < a.samples; ++s) {
    const float* g = got.data() + s * classes;
    const float* r = ref.data() + s * classes;
    for (size_t k = 0; k < classes; ++k) {
      if (std::isnan(g[k])) ++a.nan;
      else a.max_abs = std::max(a.max_abs, std::fabs(double(g[k]) - double(r[k])));
    }
    if (std::max_element(g, g + classes) == g + (std::max_element(r, r + classes) - r)) ++a.argmax_same;
  }
  return a;
}

void check_model_on_mnist(const std::shared_ptr<formats::Model>& model, bool require_same_class) {
  const auto images = mnist_images();
  if (images.count == 0) GTEST_SKIP() << mnist_images_path() << " not found";
  const size_t classes = size_t(engine::plan_graph(model).output_elements(0));
  const int max_batch = 1024;  // 10000 images: 9 full batches and a partial one of 784
  const auto ref = run_all("cpu", model, images, max_batch);
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
  auto images = mnist_images();
  if (images.count == 0) GTEST_SKIP() << mnist_images_path() << " not found";
  images.count = std::min<int64_t>(images.count, 2000);
  images.pixels.resize(size_t(images.count) * 784);
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
  const auto images = mnist_images();
  if (images.count == 0) GTEST_SKIP() << mnist_images_path() << " not found";
  auto model = testing_support::lenet5_model();
  const bool real = model != nullptr;
  if (!real) model = lenet_like_model();
  const size_t classes = size_t(engine::plan_graph(model).output_elements(0));
  const auto ref = run_all("cpu", model, images, 1024);
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
  options.max_batch = 64;
  auto exe = backend->compile(graph, options);
  const std::string summary = exe->plan_summary();
  EXPECT_NE(summary.find("node 'c1' (conv2d): CUDNN_CONVOLUTION_FWD_ALGO_"), std::string::npos) << summary;
  EXPECT_NE(summary.find("node 'c3' (conv2d): CUDNN_CONVOLUTION_FWD_ALGO_"), std::string::npos) << summary;
  EXPECT_NE(summary.find("relu 'r3' fused"), std::string::npos) << summary;
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

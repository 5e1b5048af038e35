// Whole networks on the MNIST test set (shared/data/mnist): the custom backend against the CPU
// reference (same class for every image, probabilities within 1e-5) and bitwise reproducible
// (two runs of the whole set; any batch capacity). Runs the committed LeNet-5 when it exists and a
// LeNet-shaped model with random weights (every op kind, every fusion) always.
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
#include "tests/gpu/custom_test_util.hpp"

namespace {

using formats::OpType;
using testing_support::window;

const std::string kImagesPath = std::string(ENGINE_TEST_DATA_DIR) + "/mnist/t10k-images-idx3-ubyte.gz";

struct Mnist {
  int count = 0;
  std::vector<uint8_t> pixels;  // count x 784
};

// The test set (the first 512 images under compute-sanitizer), or count 0 when the file is missing.
const Mnist& mnist() {
  static const Mnist data = [] {
    Mnist m;
    if (!std::filesystem::exists(kImagesPath)) return m;
    formats::ImageBatch batch = formats::read_idx_images(kImagesPath);
    const int64_t limit = custom_test::sanitizer_run() ? 512 : batch.count;
    m.count = int(std::min<int64_t>(batch.count, limit));
    m.pixels.assign(batch.pixels.begin(), batch.pixels.begin() + int64_t(m.count) * 784);
    return m;
  }();
  return data;
}

#define SKIP_WITHOUT_MNIST()                                                           \
  if (mnist().count == 0) GTEST_SKIP() << kImagesPath << " is missing"

// uint8 28x28 input, MNIST preprocessing with a 2-pixel border (32x32), LeNet-5 shape with tanh,
// sigmoid and relu, both pools, flatten, three dense layers and softmax; random weights.
std::shared_ptr<formats::Model> lenet_like_model() {
  formats::Preprocess p;
  p.scale = 1.0f / 255.0f;
  p.mean = {0.1307f};
  p.std = {0.3081f};
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 2;
  return testing_support::ModelBuilder("lenet_like_mnist", {1})
      .uint8_input({1, 28, 28}, p)
      .conv2d("c1", "x", 1, 6, window(5, 5, 1, 1), 211)
      .unary("t1", OpType::Tanh, "c1")
      .pool("s2", OpType::AvgPool, "t1", window(2, 2, 2, 2))
      .conv2d("c3", "s2", 6, 16, window(5, 5, 1, 1), 213)
      .unary("t3", OpType::Sigmoid, "c3")
      .pool("s4", OpType::MaxPool, "t3", window(2, 2, 2, 2))
      .unary("f", OpType::Flatten, "s4")
      .dense("d5", "f", 400, 120, 215)
      .unary("r5", OpType::Relu, "d5")
      .dense("d6", "r5", 120, 84, 217)
      .unary("t6", OpType::Tanh, "d6")
      .dense("d7", "t6", 84, 10, 219)
      .unary("prob", OpType::Softmax, "d7")
      .outputs({"prob"})
      .build();
}

// The first output for images [first, first + count), run in batches of max_batch (the last one
// partial when max_batch does not divide count).
std::vector<float> run_images(const std::shared_ptr<formats::Model>& model, const std::string& backend_name,
                              int first, int count, int max_batch) {
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = max_batch;
  auto exe = engine::BackendRegistry::instance().create(backend_name)->compile(graph, options);
  const size_t sample_bytes = size_t(formats::element_count(model->input.raw_shape));
  std::vector<std::vector<float>> outputs(graph.outputs.size());
  for (size_t o = 0; o < outputs.size(); ++o) outputs[o].resize(size_t(graph.output_elements(o)) * max_batch);
  std::vector<float*> pointers;
  for (auto& o : outputs) pointers.push_back(o.data());

  const size_t per_image = size_t(graph.output_elements(0));
  std::vector<float> result(per_image * size_t(count), std::nanf(""));
  for (int start = 0; start < count; start += max_batch) {
    const int n = std::min(max_batch, count - start);
    for (auto& o : outputs) std::fill(o.begin(), o.end(), std::nanf(""));
    exe->run(mnist().pixels.data() + size_t(first + start) * sample_bytes, n, pointers);
    std::copy(outputs[0].begin(), outputs[0].begin() + per_image * size_t(n), result.begin() + per_image * start);
  }
  return result;
}

void expect_same_as_cpu(const std::shared_ptr<formats::Model>& model) {
  ASSERT_EQ(formats::element_count(model->input.raw_shape), 784) << "model input is not 28x28";
  const int count = mnist().count;
  // 768 does not divide 10,000 (or 512): the last batch is partial.
  const int max_batch = custom_test::sanitizer_run() ? 200 : 768;
  const auto ref = run_images(model, "cpu", 0, count, max_batch);
  const auto got = run_images(model, "custom", 0, count, max_batch);
  const size_t k = ref.size() / size_t(count);
  size_t unwritten = 0, mismatches = 0;
  double max_abs = 0;
  for (int s = 0; s < count; ++s) {
    const float* r = ref.data() + k * s;
    const float* g = got.data() + k * s;
    for (size_t i = 0; i < k; ++i) {
      if (std::isnan(g[i])) ++unwritten;
      else max_abs = std::max(max_abs, std::fabs(double(g[i]) - double(r[i])));
    }
    if (std::max_element(r, r + k) - r != std::max_element(g, g + k) - g) ++mismatches;
  }
  std::cout << "[ custom ] " << model->name << ": " << count << " images, max |p_custom - p_cpu| = " << max_abs
            << ", class mismatches " << mismatches << "\n";
  EXPECT_EQ(unwritten, 0u);
  EXPECT_EQ(mismatches, 0u) << "images whose class differs from the CPU backend's";
  EXPECT_LE(max_abs, 1e-5);
}

void expect_bitwise_reproducible(const std::shared_ptr<formats::Model>& model) {
  const int count = mnist().count;
  const int max_batch = custom_test::sanitizer_run() ? 200 : 1000;
  const auto first = run_images(model, "custom", 0, count, max_batch);
  const auto second = run_images(model, "custom", 0, count, max_batch);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0)
      << "two runs of the test set differ";
  // Results do not depend on the batch a sample runs in (capacity 7, partial batches of 5).
  const int subset = 96;
  const auto small = run_images(model, "custom", 0, subset, 7);
  EXPECT_EQ(std::memcmp(small.data(), first.data(), small.size() * sizeof(float)), 0)
      << "batch capacity 7 gives other bits than capacity " << max_batch;
}

TEST(CustomLenet5, MnistSameClassesAsCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  SKIP_WITHOUT_MNIST();
  ENGINE_LOAD_LENET5_OR_SKIP(model);
  expect_same_as_cpu(model);
}

TEST(CustomLenet5, MnistBitwiseReproducible) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  SKIP_WITHOUT_MNIST();
  ENGINE_LOAD_LENET5_OR_SKIP(model);
  expect_bitwise_reproducible(model);
}

TEST(CustomLenetLike, MnistSameClassesAsCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  SKIP_WITHOUT_MNIST();
  expect_same_as_cpu(lenet_like_model());
}

TEST(CustomLenetLike, MnistBitwiseReproducible) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  SKIP_WITHOUT_MNIST();
  expect_bitwise_reproducible(lenet_like_model());
}

}  // namespace

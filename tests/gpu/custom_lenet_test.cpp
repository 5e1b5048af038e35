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
#include "tests/gpu/mnist_model_util.hpp"

namespace {

using formats::OpType;
using testing_support::window;

using gpu_test::agreement;
using gpu_test::mnist_images;
using gpu_test::run_all;

#define SKIP_WITHOUT_MNIST() \
  if (mnist_images().count == 0) GTEST_SKIP() << gpu_test::mnist_images_path() << " is missing"

// Tanh, sigmoid and relu, both pools (the custom backend fuses every activation into its producer).
std::shared_ptr<formats::Model> lenet_like_model() {
  testing_support::LenetLike o;
  o.name = "lenet_like_mnist";
  o.seed = 211;
  return testing_support::lenet_like_model(o);
}

void expect_same_as_cpu(const std::shared_ptr<formats::Model>& model) {
  ASSERT_EQ(formats::element_count(model->input.raw_shape), 784) << "model input is not 28x28";
  const auto& images = mnist_images();
  // 768 does not divide 10,000 (or 512): the last batch is partial.
  const int max_batch = custom_test::sanitizer_run() ? 200 : 768;
  const auto ref = run_all("reference", model, images, max_batch);
  const auto got = run_all("custom", model, images, max_batch);
  const auto a = agreement(got, ref, ref.size() / size_t(images.count));
  std::cout << "[ custom ] " << model->name << ": " << a.samples << " images, max |p_custom - p_cpu| = " << a.max_abs
            << ", same class " << a.argmax_same << "\n";
  EXPECT_EQ(a.nan, 0u);
  EXPECT_EQ(a.argmax_same, a.samples) << "images whose class differs from the CPU backend's";
  EXPECT_LE(a.max_abs, 1e-5);
}

void expect_bitwise_reproducible(const std::shared_ptr<formats::Model>& model) {
  const auto& images = mnist_images();
  const int max_batch = custom_test::sanitizer_run() ? 200 : 1000;
  const auto first = run_all("custom", model, images, max_batch);
  const auto second = run_all("custom", model, images, max_batch);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0)
      << "two runs of the test set differ";
  // Results do not depend on the batch a sample runs in (capacity 7, partial batches of 5).
  const auto small = run_all("custom", model, gpu_test::first_images(images, 96), 7);
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

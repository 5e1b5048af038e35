#pragma once
// Whole models on the MNIST test set, for the GPU backends' model tests (tests/gpu/*_model_test.cpp,
// custom_lenet_test.cpp): the images, a batched run of any backend, and how two runs agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/idx.hpp"
#include "tests/gpu/gpu_op_test_util.hpp"

namespace gpu_test {

inline std::string mnist_images_path() {
  return std::string(ENGINE_TEST_DATA_DIR) + "/mnist/t10k-images-idx3-ubyte.gz";
}

// The first `count` images of `images` (all of them when it has fewer).
inline formats::ImageBatch first_images(const formats::ImageBatch& images, int64_t count) {
  formats::ImageBatch b = images;
  b.count = std::min(images.count, count);
  b.pixels.resize(size_t(b.count) * size_t(b.channels * b.height * b.width));
  return b;
}

// The MNIST test images (the first 512 under compute-sanitizer), or a batch of 0 images when the file
// is missing. Read once per process.
inline const formats::ImageBatch& mnist_images() {
  static const formats::ImageBatch images = [] {
    formats::ImageBatch b;
    if (!std::filesystem::exists(mnist_images_path())) return b;
    b = formats::read_idx_images(mnist_images_path());
    return first_images(b, sanitizer_run() ? 512 : b.count);
  }();
  return images;
}

// Runs every image through one executable compiled for `max_batch`, in batches of max_batch (the last
// one partial), with NaN-poisoned output buffers; returns the first output, [count, elements].
inline std::vector<float> run_all(engine::Backend& backend, const std::shared_ptr<formats::Model>& model,
                                  const formats::ImageBatch& images, int max_batch,
                                  const engine::CompileOptions& base = {}, std::string* summary = nullptr) {
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options = base;
  options.max_batch = max_batch;
  auto exe = backend.compile(graph, options);
  if (summary) *summary = exe->plan_summary();
  const size_t per_image = size_t(images.channels * images.height * images.width);
  std::vector<std::vector<float>> outputs(graph.outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i].resize(size_t(graph.output_elements(i)) * size_t(max_batch));
  std::vector<float*> pointers;
  for (auto& o : outputs) pointers.push_back(o.data());
  const size_t out0 = size_t(graph.output_elements(0));
  std::vector<float> result(out0 * size_t(images.count), std::nanf(""));
  for (int64_t start = 0; start < images.count; start += max_batch) {
    const int n = int(std::min<int64_t>(max_batch, images.count - start));
    for (auto& o : outputs) std::fill(o.begin(), o.end(), std::nanf(""));
    exe->run(images.pixels.data() + size_t(start) * per_image, n, pointers);
    std::copy(outputs[0].begin(), outputs[0].begin() + ptrdiff_t(out0 * size_t(n)),
              result.begin() + ptrdiff_t(out0 * size_t(start)));
  }
  return result;
}

inline std::vector<float> run_all(const std::string& backend_name, const std::shared_ptr<formats::Model>& model,
                                  const formats::ImageBatch& images, int max_batch,
                                  const engine::CompileOptions& base = {}, std::string* summary = nullptr) {
  return run_all(*engine::BackendRegistry::instance().create(backend_name), model, images, max_batch, base, summary);
}

// How a backend's probabilities compare with the reference's, sample by sample.
struct Agreement {
  double max_abs = 0;
  size_t nan = 0, argmax_same = 0, samples = 0;
};

inline Agreement agreement(const std::vector<float>& got, const std::vector<float>& ref, size_t classes) {
  Agreement a;
  a.samples = ref.size() / classes;
  for (size_t s = 0; s < a.samples; ++s) {
    const float* g = got.data() + s * classes;
    const float* r = ref.data() + s * classes;
    for (size_t k = 0; k < classes; ++k) {
      if (std::isnan(g[k])) ++a.nan;
      else a.max_abs = std::max(a.max_abs, std::fabs(double(g[k]) - double(r[k])));
    }
    if (std::max_element(g, g + classes) - g == std::max_element(r, r + classes) - r) ++a.argmax_same;
  }
  return a;
}

}  // namespace gpu_test

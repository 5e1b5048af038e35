#pragma once
// What the GPU backends' op tests share (tests/gpu/custom_*.cpp, tests/gpu/cudnn_*.cpp): batch cases,
// node attributes, and "run this model on backend X and on cpu, NaN-poisoned, and check".
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/registry.hpp"
#include "formats/model.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace gpu_test {

// CUDA devices visible to this process; 0 without a usable driver (the error is cleared, so a later
// launch check does not report it as its own).
inline int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// ENGINE_SANITIZER_RUN=1: compute-sanitizer runs kernels 10-100x slower; tests use fewer, smaller runs.
inline bool sanitizer_run() {
  const char* v = std::getenv("ENGINE_SANITIZER_RUN");
  return v != nullptr && std::string(v) == "1";
}

// Batch sizes of the op tests: 1, a partial batch (7 of a capacity of 256: the case of a run's last
// batch), full large batches.
struct BatchCase {
  int batch, max_batch;
};
inline std::vector<BatchCase> batch_cases() {
  if (sanitizer_run()) return {{1, 1}, {7, 64}, {64, 64}};
  return {{1, 1}, {7, 256}, {256, 256}, {1000, 1000}};
}
// Batches past 65,535 samples, where 16-bit grid dimensions end (cuDNN's pooling kernels refuse N =
// 65,536): one full and one partial. Per-sample sizes in these tests are tiny.
inline std::vector<BatchCase> huge_batch_cases() { return {{70001, 70001}, {65536 + 3, 70001}}; }

inline formats::Node conv_attrs(int out_channels, formats::Window2D win) {
  formats::Node n;
  n.out_channels = out_channels;
  n.window = win;
  return n;
}

inline formats::Node pool_attrs(formats::Window2D win, bool count_include_pad = true) {
  formats::Node n;
  n.window = win;
  n.count_include_pad = count_include_pad;
  return n;
}

inline formats::Node dense_attrs(int units) {
  formats::Node n;
  n.units = units;
  return n;
}

// Fresh random float inputs in [lo, hi) for `batch` samples; `backend` against cpu: no unwritten (NaN)
// element, relative error (compare_with_cpu's measure) at most `tolerance`.
inline void expect_matches_cpu(engine::Backend& backend, const std::shared_ptr<formats::Model>& model,
                               const BatchCase& bc, uint32_t seed, float lo, float hi,
                               const engine::CompileOptions& options, double tolerance) {
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const auto input = testing_support::random_floats(per_sample * size_t(bc.batch), seed, lo, hi);
  const auto c = testing_support::compare_with_cpu(model, backend, input.data(), bc.batch, bc.max_batch, options);
  const std::string where = "model '" + model->name + "', batch " + std::to_string(bc.batch) + " of " +
                            std::to_string(bc.max_batch);
  EXPECT_EQ(c.unwritten, 0u) << where << ": NaN (unwritten) elements in the " << backend.name() << " output";
  EXPECT_LE(c.max_rel_error, tolerance) << where << ", worst " << c.worst;
  EXPECT_GT(c.elements, 0u) << where;
}

// The same for the registry's backend `backend`.
inline void expect_matches_cpu(const std::string& backend, const std::shared_ptr<formats::Model>& model,
                               const BatchCase& bc, uint32_t seed, float lo, float hi,
                               const engine::CompileOptions& options, double tolerance) {
  expect_matches_cpu(*engine::BackendRegistry::instance().create(backend), model, bc, seed, lo, hi, options,
                     tolerance);
}

// Small models of every op kind, for the huge-batch cases: each call's batch crosses 65,535 samples.
struct HugeBatchModel {
  std::shared_ptr<formats::Model> model;
  bool reduction = false;  // sums products (conv2d, dense): the backend's reduction bound applies
  float lo = -1.0f, hi = 1.0f;
};
inline std::vector<HugeBatchModel> huge_batch_models() {
  using formats::OpType;
  using testing_support::single_op_model;
  using testing_support::window;
  return {
      {single_op_model(OpType::MaxPool, {2, 4, 4}, pool_attrs(window(2, 2, 2, 2)), 4000)},
      {single_op_model(OpType::MaxPool, {1, 5, 5}, pool_attrs(window(3, 2, 2, 1, 0, 2, 1, 0)), 4010)},  // padded copy
      {single_op_model(OpType::AvgPool, {3, 6, 6}, pool_attrs(window(3, 3, 2, 2, 1, 1, 1, 1), false), 4020)},
      {single_op_model(OpType::Relu, {3}, formats::Node{}, 4030)},
      {single_op_model(OpType::Tanh, {5}, formats::Node{}, 4040), false, -4.0f, 4.0f},
      {single_op_model(OpType::Softmax, {10}, formats::Node{}, 4050), false, -20.0f, 20.0f},
      {testing_support::add_dag_model({4})},
      {single_op_model(OpType::ScaleShift, {3, 2, 1}, formats::Node{}, 4080)},
      {testing_support::concat_dag_model({2, 1, 3})},
      {single_op_model(OpType::Conv2D, {1, 6, 6}, conv_attrs(2, window(3, 3, 1, 1, 1, 0, 0, 1)), 4060), true},
      {single_op_model(OpType::Dense, {7}, dense_attrs(3), 4070), true},
  };
}

}  // namespace gpu_test

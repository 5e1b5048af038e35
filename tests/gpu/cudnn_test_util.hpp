#pragma once
// Helpers shared by the cudnn backend's tests (tests/gpu/cudnn_*.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "formats/model.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/test_models.hpp"

namespace cudnn_test {

// Parity bounds of fp32 cuDNN/cuBLAS against the CPU reference (double accumulation), relative error
// as compare_with_cpu defines it (|a - b| / max(|ref|, 1e-2 * peak of the output)).
// Elementwise ops, pooling and softmax: 1e-5.
inline constexpr double kFp32Tolerance = 1e-5;
// Ops that sum K products (conv2d, dense, and what follows them): fp32 accumulation, whatever its order,
// leaves errors of about sqrt(K) * 2^-24 * |terms| where the CPU's double sum leaves none; measured on
// an H100 (cuDNN 9.14, cuBLAS 13.1): up to 2.1e-5 by this measure over 1000-sample batches (K = 25..1000).
// 5e-5 keeps a 2x margin and still fails TF32 (10-bit mantissa inputs: errors of order 1e-3) and any
// indexing bug (order 1).
inline constexpr double kFp32ReductionTolerance = 5e-5;

// ENGINE_SANITIZER_RUN=1: compute-sanitizer runs kernels 10-100x slower; tests use fewer, smaller runs.
inline bool sanitizer_run() {
  const char* v = std::getenv("ENGINE_SANITIZER_RUN");
  return v != nullptr && std::string(v) == "1";
}

// Batch sizes of the op tests: 1, a partial batch (7 of a capacity of 256: descriptors re-described
// for n < max_batch, the case of a run's last batch), full large batches.
struct BatchCase {
  int batch, max_batch;
};
inline std::vector<BatchCase> batch_cases() {
  if (sanitizer_run()) return {{1, 1}, {7, 64}, {64, 64}};
  return {{1, 1}, {7, 256}, {256, 256}, {1000, 1000}};
}

// Fresh random float inputs in [lo, hi) for `batch` samples; cudnn against cpu.
inline void expect_matches_cpu(const std::shared_ptr<formats::Model>& model, const BatchCase& bc, uint32_t seed,
                               float lo = -1.0f, float hi = 1.0f, const engine::CompileOptions& options = {},
                               double tolerance = kFp32Tolerance) {
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const auto input = testing_support::random_floats(per_sample * size_t(bc.batch), seed, lo, hi);
  const auto c = testing_support::compare_with_cpu(model, "cudnn", input.data(), bc.batch, bc.max_batch, options);
  const std::string where = "model '" + model->name + "', batch " + std::to_string(bc.batch) + " of " +
                            std::to_string(bc.max_batch);
  EXPECT_EQ(c.unwritten, 0u) << where << ": NaN (unwritten) elements in the cudnn output";
  EXPECT_LE(c.max_rel_error, tolerance) << where << ", worst " << c.worst;
  EXPECT_GT(c.elements, 0u) << where;
}

inline void expect_matches_cpu_all_batches(const std::shared_ptr<formats::Model>& model, uint32_t seed,
                                           float lo = -1.0f, float hi = 1.0f, double tolerance = kFp32Tolerance) {
  for (const auto& bc : batch_cases()) expect_matches_cpu(model, bc, seed + uint32_t(bc.batch), lo, hi, {}, tolerance);
}

// conv2d / dense models: the reduction bound.
inline void expect_reduction_matches_cpu_all_batches(const std::shared_ptr<formats::Model>& model, uint32_t seed) {
  expect_matches_cpu_all_batches(model, seed, -1.0f, 1.0f, kFp32ReductionTolerance);
}

}  // namespace cudnn_test

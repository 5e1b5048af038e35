#pragma once
// The cudnn backend's op-test checks: gpu_op_test_util.hpp with backend "cudnn" and its fp32 bounds.
#include "tests/gpu/gpu_op_test_util.hpp"

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

using gpu_test::BatchCase;
using gpu_test::batch_cases;
using gpu_test::sanitizer_run;

inline void expect_matches_cpu(const std::shared_ptr<formats::Model>& model, const BatchCase& bc, uint32_t seed,
                               float lo = -1.0f, float hi = 1.0f, const engine::CompileOptions& options = {},
                               double tolerance = kFp32Tolerance) {
  gpu_test::expect_matches_cpu("cudnn", model, bc, seed, lo, hi, options, tolerance);
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

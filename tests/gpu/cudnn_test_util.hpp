#pragma once
// The cudnn backend's op-test checks: gpu_op_test_util.hpp with backend "cudnn" and its fp32 bounds.
#include "engine/cudnn/cudnn_options.hpp"
#include "tests/gpu/gpu_op_test_util.hpp"

namespace cudnn_test {

// Parity bounds of fp32 cuDNN/cuBLAS against the CPU reference (double accumulation), relative error
// as compare_with_cpu defines it (|a - b| / max(|ref|, 1e-2 * peak of the output)).
// Elementwise ops, pooling and softmax: 1e-5.
inline constexpr double kFp32Tolerance = 1e-5;
// Ops that sum K products (conv2d, dense, and what follows them): fp32 accumulation, whatever its order,
// leaves errors of about sqrt(K) * 2^-24 * |terms| where the CPU's double sum leaves none: up to about
// 5.1e-5 by this measure over 1000-sample batches (K = 25..1000; the largest from cuBLASLt's kernel for a
// 1000 -> 37 dense layer on an H200). 1e-4 keeps a 2x margin and still fails TF32 (10-bit mantissa
// inputs: errors of order 1e-3) and any indexing bug (order 1).
inline constexpr double kFp32ReductionTolerance = 1e-4;

using gpu_test::BatchCase;
using gpu_test::batch_cases;
using gpu_test::sanitizer_run;

// `cudnn_options`: the backend's own choices fixed (engine/cudnn/cudnn_options.hpp); the defaults are
// the registry's "cudnn".
inline void expect_matches_cpu(const std::shared_ptr<formats::Model>& model, const BatchCase& bc, uint32_t seed,
                               float lo = -1.0f, float hi = 1.0f, const engine::CompileOptions& options = {},
                               double tolerance = kFp32Tolerance,
                               const engine::cudnn::CudnnOptions& cudnn_options = {}) {
  gpu_test::expect_matches_cpu(*engine::cudnn::make_cudnn_backend(cudnn_options), model, bc, seed, lo, hi, options,
                               tolerance);
}

inline void expect_matches_cpu_all_batches(const std::shared_ptr<formats::Model>& model, uint32_t seed,
                                           float lo = -1.0f, float hi = 1.0f, double tolerance = kFp32Tolerance,
                                           const engine::cudnn::CudnnOptions& cudnn_options = {}) {
  for (const auto& bc : batch_cases())
    expect_matches_cpu(model, bc, seed + uint32_t(bc.batch), lo, hi, {}, tolerance, cudnn_options);
}

// conv2d / dense models: the reduction bound.
inline void expect_reduction_matches_cpu_all_batches(const std::shared_ptr<formats::Model>& model, uint32_t seed,
                                                     const engine::cudnn::CudnnOptions& cudnn_options = {}) {
  expect_matches_cpu_all_batches(model, seed, -1.0f, 1.0f, kFp32ReductionTolerance, cudnn_options);
}

}  // namespace cudnn_test

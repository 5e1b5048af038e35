#pragma once
// The custom backend's op-test checks: gpu_op_test_util.hpp with backend "custom" and its bound.
// These check the per-node kernels (CompileOptions::fuse off: a single-op model would otherwise take
// the fused path). They accumulate in double, so every op, reductions included, is held to 1e-5.
// The fused fp32 path has its own tests and bound (custom_fused_test.cpp).
#include "tests/gpu/gpu_op_test_util.hpp"

namespace custom_test {

inline engine::CompileOptions per_node_options() {
  engine::CompileOptions o;
  o.fuse = false;
  return o;
}

using gpu_test::BatchCase;
using gpu_test::batch_cases;
using gpu_test::sanitizer_run;

inline void expect_matches_cpu(const std::shared_ptr<formats::Model>& model, const BatchCase& bc, uint32_t seed,
                               float lo = -1.0f, float hi = 1.0f) {
  gpu_test::expect_matches_cpu("custom", model, bc, seed, lo, hi, per_node_options(), 1e-5);
}

inline void expect_matches_cpu_all_batches(const std::shared_ptr<formats::Model>& model, uint32_t seed,
                                           float lo = -1.0f, float hi = 1.0f) {
  for (const auto& bc : batch_cases()) expect_matches_cpu(model, bc, seed + uint32_t(bc.batch), lo, hi);
}

}  // namespace custom_test

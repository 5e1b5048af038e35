#pragma once
// Helpers shared by the custom backend's tests (tests/gpu/custom_*.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "formats/model.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/test_models.hpp"

namespace custom_test {

// ENGINE_SANITIZER_RUN=1: compute-sanitizer runs kernels 10-100x slower; tests use smaller sizes.
inline bool sanitizer_run() {
  const char* v = std::getenv("ENGINE_SANITIZER_RUN");
  return v != nullptr && std::string(v) == "1";
}

// Batch sizes of the op tests: 1, a partial batch (7 of a capacity of 256), full large batches.
struct BatchCase {
  int batch, max_batch;
};
inline std::vector<BatchCase> batch_cases() {
  if (sanitizer_run()) return {{1, 1}, {7, 64}, {64, 64}};
  return {{1, 1}, {7, 256}, {256, 256}, {1000, 1000}};
}

// Random float inputs for `batch` samples of the model's input, run on custom and cpu, checked.
inline void expect_matches_cpu(const std::shared_ptr<formats::Model>& model, const BatchCase& bc, uint32_t seed,
                               float lo = -1.0f, float hi = 1.0f) {
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const auto input = testing_support::random_floats(per_sample * size_t(bc.batch), seed, lo, hi);
  const auto c = testing_support::compare_with_cpu(model, "custom", input.data(), bc.batch, bc.max_batch);
  const std::string where = "model '" + model->name + "', batch " + std::to_string(bc.batch) + " of " +
                            std::to_string(bc.max_batch);
  EXPECT_EQ(c.unwritten, 0u) << where << ": NaN (unwritten) elements in the custom output";
  EXPECT_LE(c.max_rel_error, 1e-5) << where << ", worst " << c.worst;
  EXPECT_GT(c.elements, 0u) << where;
}

inline void expect_matches_cpu_all_batches(const std::shared_ptr<formats::Model>& model, uint32_t seed,
                                           float lo = -1.0f, float hi = 1.0f) {
  for (const auto& bc : batch_cases()) expect_matches_cpu(model, bc, seed + uint32_t(bc.batch), lo, hi);
}

}  // namespace custom_test

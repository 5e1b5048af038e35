#pragma once
// Runs one model on two backends (the reference is "cpu") with NaN-poisoned output buffers and
// reports the worst relative error; used by every backend's op tests.
#include <memory>
#include <string>
#include <vector>

#include "formats/model.hpp"

namespace testing_support {

struct Comparison {
  double max_abs_error = 0;
  double max_rel_error = 0;  // |a - b| / max(|b|, 1e-3)... see compare.cpp for the exact rule
  size_t unwritten = 0;      // NaN elements left in the tested backend's output
  size_t elements = 0;
};

// Runs `model` on backend `name` and on "cpu" for `batch` samples of `input` (raw dtype of the
// model: uint8 or float32 bytes), compares every output.
Comparison compare_with_cpu(const std::shared_ptr<formats::Model>& model, const std::string& name,
                            const void* input, int batch, int max_batch);

// Why backend `name` cannot run here (not built, no GPU), or "" when it can.
std::string backend_unavailable_reason(const std::string& name);

}  // namespace testing_support

// In a test body: skip (reported as skipped by ctest) when the backend cannot run here.
#define ENGINE_SKIP_UNLESS_BACKEND(name)                                                   \
  do {                                                                                      \
    const std::string engine_skip_reason_ = ::testing_support::backend_unavailable_reason(name); \
    if (!engine_skip_reason_.empty()) GTEST_SKIP() << engine_skip_reason_;                  \
  } while (0)

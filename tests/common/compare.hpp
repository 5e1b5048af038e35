#pragma once
// Runs one model on two backends (the reference is "reference") with NaN-poisoned output buffers and
// reports the worst errors; used by every backend's op tests.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"
#include "formats/model.hpp"

namespace testing_support {

struct Comparison {
  double max_abs_error = 0;
  // Per element |a - b| / max(|ref|, 1e-2 * peak, 1e-6), peak = the largest |ref| of that output
  // over the batch. A dot product's rounding error scales with the size of its terms, not of its
  // possibly cancelled result, so an element near zero is judged against the output's own scale;
  // an indexing bug still shows as an error near 1.
  double max_rel_error = 0;
  size_t unwritten = 0;   // NaN elements left in the tested backend's output (buffers start as NaN)
  size_t elements = 0;    // compared elements, all outputs together
  size_t argmax_mismatches = 0;  // samples whose first output's argmax differs from the reference
  std::string worst;      // where max_rel_error was seen: "output 'y' sample 3 element 17: 0.5 vs 0.49"
};

// Runs `model` on backend `name` and on "reference" for `batch` samples of `input` (raw dtype of the
// model: uint8 or float32 bytes), compiling both for `max_batch`, and compares every output.
// Throws when a backend cannot be created or compiled, or when the reference itself yields NaN.
Comparison compare_with_cpu(const std::shared_ptr<formats::Model>& model, const std::string& name,
                            const void* input, int batch, int max_batch,
                            const engine::CompileOptions& options = {});

// Runs `model` on backend `name` (compiled for max_batch) and returns every output, each
// [batch, elements], starting from NaN-filled buffers.
std::vector<std::vector<float>> run_backend(const std::shared_ptr<formats::Model>& model, const std::string& name,
                                            const void* input, int batch, int max_batch,
                                            const engine::CompileOptions& options = {});

// The same two with a backend the caller made: a backend's own factory with its typed options
// (cudnn::make_cudnn_backend, cpu::make_cpu_backend).
std::vector<std::vector<float>> run_backend(const std::shared_ptr<formats::Model>& model, engine::Backend& backend,
                                            const void* input, int batch, int max_batch,
                                            const engine::CompileOptions& options = {});
Comparison compare_with_cpu(const std::shared_ptr<formats::Model>& model, engine::Backend& backend,
                            const void* input, int batch, int max_batch,
                            const engine::CompileOptions& options = {});

// The index of the first element whose bits differ between `a` and `b` (sizes equal), or a.size()
// when every bit is the same: for checks that two paths give the same bits.
size_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b);

// Why backend `name` cannot run here (not built, no GPU), or "" when it can.
std::string backend_unavailable_reason(const std::string& name);

}  // namespace testing_support

// In a test body: skip (reported as skipped by ctest) when the backend cannot run here.
#define ENGINE_SKIP_UNLESS_BACKEND(name)                                                   \
  do {                                                                                      \
    const std::string engine_skip_reason_ = ::testing_support::backend_unavailable_reason(name); \
    if (!engine_skip_reason_.empty()) GTEST_SKIP() << engine_skip_reason_;                  \
  } while (0)

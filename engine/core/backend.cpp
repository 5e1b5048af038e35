#include "engine/core/backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace engine {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
    case Precision::INT8: return "int8";
  }
  return "?";
}

std::optional<Precision> parse_precision(const std::string& name) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16, Precision::INT8})
    if (name == precision_name(p)) return p;
  return std::nullopt;
}

void require_precision(const Backend& backend, const CompileOptions& options) {
  if (backend.supports(options.precision)) return;
  throw std::invalid_argument(fmt::format(
      "backend '{}' does not compute {} (not implemented there yet); the reference backend emulates it "
      "(--backend reference) to measure its accuracy",
      backend.name(), precision_name(options.precision)));
}

void check_supported(const Backend& backend, const Graph& graph) {
  // Every refusal in one message: fixing them one run at a time would be tedious.
  std::string problems;
  int count = 0;
  for (const PlannedNode& planned : graph.nodes) {
    const formats::Node& node = *planned.node;
    if (auto why = backend.unsupported(node)) {
      problems += fmt::format("{}node '{}' ({}): {}", count ? "; " : "", node.name, formats::op_name(node.op), *why);
      ++count;
    }
  }
  if (count > 0)
    throw std::runtime_error(fmt::format("backend '{}' cannot run model '{}' ({} unsupported node{}): {}",
                                         backend.name(), graph.model->name, count, count == 1 ? "" : "s",
                                         problems));
}

void check_batch_stream(const BatchStream& s, int max_batch) {
  if (s.batch < 1 || s.batch > max_batch)
    throw std::invalid_argument(fmt::format("batch of {} images outside 1..{}", s.batch, max_batch));
  if (s.count < 0) throw std::invalid_argument(fmt::format("a negative image count ({})", s.count));
  if (s.outputs.size() != s.output_elements.size())
    throw std::invalid_argument(fmt::format("{} output buffers for {} output sizes", s.outputs.size(),
                                            s.output_elements.size()));
}

void Executable::run_batches(const BatchStream& s) {
  check_batch_stream(s, max_batch());
  std::vector<float*> at(s.outputs.size());
  for (int64_t start = 0; start < s.count; start += s.batch) {
    const int n = int(std::min<int64_t>(s.batch, s.count - start));
    for (size_t i = 0; i < at.size(); ++i) at[i] = s.outputs[i] + start * s.output_elements[i];
    run(static_cast<const uint8_t*>(s.input) + size_t(start) * s.sample_bytes, n, at);
  }
}

std::optional<std::string> Backend::cannot_train() const {
  return fmt::format("backend '{}' has no training yet (train with --backend reference, cpu or custom)", name());
}

std::unique_ptr<TrainExecutable> Backend::compile_training(const Graph& /*graph*/, const TrainOptions& /*options*/) {
  throw std::runtime_error(cannot_train().value_or(fmt::format("backend '{}' cannot train", name())));
}

}  // namespace engine

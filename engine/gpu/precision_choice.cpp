#include "engine/gpu/precision_choice.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace engine::gpu {

std::vector<Precision> allowed_precisions(Precision asked) {
  switch (asked) {
    case Precision::INT8: return {Precision::INT8, Precision::FP16, Precision::FP32};
    case Precision::FP16: return {Precision::FP16, Precision::FP32};
    case Precision::BF16: return {Precision::BF16, Precision::FP32};
    case Precision::FP32:
    case Precision::TF32: break;
  }
  return {asked};
}

PrecisionDecision choose_precision(Precision asked, const std::vector<PrecisionTiming>& timings, int batch) {
  if (timings.empty()) throw std::logic_error("choose_precision: no timings");
  PrecisionDecision d;
  for (size_t i = 1; i < timings.size(); ++i)
    if (timings[i].ms < timings[d.chosen].ms) d.chosen = i;
  std::string times;
  for (const auto& t : timings)
    times += fmt::format("{}{} {:.4g} ms", times.empty() ? "" : ", ", precision_name(t.precision), t.ms);
  const Precision taken = timings[d.chosen].precision;
  d.note = fmt::format("precision: {} asked, {} runs ({}; the fastest forward pass at batch {}: {}; a wider "
                       "precision keeps {}'s accuracy bound)",
                       precision_name(asked), precision_name(taken),
                       taken == asked ? "as asked" : fmt::format("{} allows it", precision_name(asked)), batch,
                       times, precision_name(asked));
  return d;
}

double time_compute_ms(StagedExecution& staged, int n) {
  constexpr int kRuns = 3;
  staged.compute(n);
  auto start = staged.make_time_point();
  auto stop = staged.make_time_point();
  start->record();
  for (int i = 0; i < kRuns; ++i) staged.compute(n);
  stop->record();
  return stop->ms_since(*start) / kRuns;
}

}  // namespace engine::gpu

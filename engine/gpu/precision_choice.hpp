#pragma once
// A reduced precision is a permission, not an order (TensorRT's builder flags): int8 lets a model run
// on int8, fp16 or fp32 kernels, fp16 on fp16 or fp32, bf16 on bf16 or fp32; each wider precision is
// at least as accurate, so the bound of the one asked for still holds. Both GPU backends compile the
// model once per allowed precision, time a forward pass of each at the executable's batch, and keep
// the fastest (compile_fastest below). The choice is per model: mixing precisions per layer would add
// a conversion pass at every boundary. Host-only logic; the choice itself is tested without a GPU.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/backend.hpp"

namespace engine::gpu {

// Fastest: the permission above. AsAsked: exactly the precision asked (tests of a precision's own
// kernels; the choice's timings would make which kernels a test runs depend on the machine).
enum class PrecisionChoice { Fastest, AsAsked };

// The precisions a model compiled for `asked` may run at, narrowest first (`asked` itself first).
std::vector<Precision> allowed_precisions(Precision asked);

struct PrecisionTiming {
  Precision precision = Precision::FP32;
  double ms = 0;  // one forward pass at the planned batch
};

struct PrecisionDecision {
  size_t chosen = 0;  // index into the timings
  std::string note;   // the plan's line: what was asked, what runs, the times it was chosen on
};

// The fastest of `timings` (a tie goes to the earlier, narrower one), with the plan's line.
// `timings` must not be empty.
PrecisionDecision choose_precision(Precision asked, const std::vector<PrecisionTiming>& timings, int batch);

// Milliseconds of one compute(n) of a staged executable (after one untimed call that loads modules
// and sets kernel attributes), the mean of three; the input is whatever the executable holds.
double time_compute_ms(StagedExecution& staged, int n);

template <class Exe>
struct ChosenExecutable {
  std::unique_ptr<Exe> exe;
  std::string note;  // the plan's line (choose_precision); empty where only the asked precision was allowed
};

// The executable at the precision asked (AsAsked, or nothing else allowed), or the fastest of those
// `options.precision` allows: compile(options at p) builds each, time(executable) gives its
// milliseconds at options.max_batch; candidates are built one after the other and the slower freed
// before the next is built, so at most two are alive at once.
template <class Exe, class Compile, class Time>
ChosenExecutable<Exe> compile_fastest(const CompileOptions& options, PrecisionChoice choice, Compile&& compile,
                                      Time&& time) {
  const auto allowed =
      choice == PrecisionChoice::AsAsked ? std::vector<Precision>{options.precision} : allowed_precisions(options.precision);
  if (allowed.size() == 1) return {compile(options), {}};
  ChosenExecutable<Exe> best;
  std::vector<PrecisionTiming> timings;
  for (const Precision p : allowed) {
    CompileOptions at = options;
    at.precision = p;
    std::unique_ptr<Exe> candidate = compile(at);
    timings.push_back(PrecisionTiming{p, double(time(*candidate))});
    if (choose_precision(options.precision, timings, options.max_batch).chosen == timings.size() - 1)
      best.exe = std::move(candidate);
  }
  best.note = choose_precision(options.precision, timings, options.max_batch).note;
  return best;
}

}  // namespace engine::gpu

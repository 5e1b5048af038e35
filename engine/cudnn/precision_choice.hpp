#pragma once
// A reduced precision is a permission, not an order (TensorRT's builder flags): int8 lets a model run
// on int8, fp16 or fp32 kernels, fp16 on fp16 or fp32, bf16 on bf16 or fp32; each wider precision is
// at least as accurate, so the bound of the one asked for still holds. The cudnn backend compiles the
// model once per allowed precision, times a forward pass of each at the executable's batch, and keeps
// the fastest (cudnn_backend.cpp). The choice is per model: mixing precisions per layer would add a
// conversion pass at every boundary. Host-only logic, tested without a GPU.
#include <string>
#include <vector>

#include "engine/core/backend.hpp"

namespace engine::cudnn {

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

}  // namespace engine::cudnn

#pragma once
// The optimiser update on the device: engine/core/optimizer.hpp's optimizer_update<float>, same
// formulas in the same order of float operations (built with --fmad=false: no contraction the host
// code does not have either). What changes every step (the scheduled lr, Adam's bias corrections,
// whether this is SGD-momentum's first step) is read from device memory, so a CUDA graph captured
// once can be replayed with new values written before each launch.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/core/optimizer.hpp"

namespace engine::gpu::train {

// Per step, written by the host before the step's launch.
struct StepScalars {
  float lr;         // float(scheduled_lr(o, t))
  float step_size;  // Adam: float(scheduled_lr(o, t) / (1 - beta1^(t+1)))
  float bc2_sqrt;   // Adam: float(sqrt(1 - beta2^(t+1)))
  int first;        // t == 0 (SGD momentum: the buffer starts as the gradient)
};

// The scalars of step t, formed in double and rounded to float as optimizer_update<float> does.
StepScalars step_scalars(const OptimizerOptions& o, int64_t t);

// Updates params [0, count) of the given arrays (state2: Adam only, else null).
void optimizer_step(const OptimizerOptions& o, float* params, const float* grads, float* state1, float* state2,
                    long long count, const StepScalars* scalars, cudaStream_t stream);

}  // namespace engine::gpu::train

#pragma once
// Elementwise kernels over a whole batch block ([n, elements] is contiguous in the arena):
// activation_forward (relu, tanh, sigmoid; tanh and exp evaluated in double and rounded once, as
// the CPU reference does) and add_forward (a float sum is already correctly rounded). One thread
// per element, grid-stride loop.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom {

struct ElementwiseLaunch {
  int threads = 256;
  int max_blocks = 1;
};

ElementwiseLaunch elementwise_plan(const DeviceLimits& limits);
// y[i] = act(x[i]) for i < count.
void activation_forward(const float* x, float* y, int64_t count, Activation act, const ElementwiseLaunch& launch,
                        cudaStream_t stream, const std::string& context);
// y[i] = a[i] + b[i] for i < count.
void add_forward(const float* a, const float* b, float* y, int64_t count, const ElementwiseLaunch& launch,
                 cudaStream_t stream, const std::string& context);

}  // namespace engine::custom

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

// y[s, c, i] = x[s, c, i] * scale[c] + shift[c] for `samples` samples of `channels` x `inner`
// elements (scale_shift), in double and rounded once, as the CPU reference does it.
void scale_shift_forward(const float* x, float* y, const float* scale, const float* shift, int64_t samples,
                         int64_t channels, int64_t inner, const ElementwiseLaunch& launch, cudaStream_t stream,
                         const std::string& context);
// y[s, offset + e] = x[s, e] for e < x_elements: one concat input into its slice of every sample
// of the output (y_elements floats per sample).
void slice_copy_forward(const float* x, float* y, int64_t samples, int64_t x_elements, int64_t y_elements,
                        int64_t offset, const ElementwiseLaunch& launch, cudaStream_t stream,
                        const std::string& context);

}  // namespace engine::custom

#pragma once
// softmax_forward: numerically stable softmax of each row (one sample's [K] vector), one warp per
// row in a single kernel: the warp finds the row maximum, sums exp(x - max) in double (lane-strided
// partial sums, then a fixed butterfly reduction: deterministic), then writes exp(x - max) / sum.
// exp is evaluated in double and rounded once, as the CPU reference does.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom {

struct SoftmaxLaunch {
  int warps_per_block = 8;
  int max_blocks = 1;
};

SoftmaxLaunch softmax_plan(int64_t row_length, const DeviceLimits& limits);
// x, y: [rows, row_length]; y may equal x.
void softmax_forward(const float* x, float* y, int rows, int64_t row_length, const SoftmaxLaunch& launch,
                     cudaStream_t stream, const std::string& context);

}  // namespace engine::custom

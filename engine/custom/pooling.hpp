#pragma once
// maxpool_forward / avgpool_forward: one thread per output element (grid-stride loop over the
// whole batch). Pooling windows are small and the op is memory-bound; the window is clipped to the
// input once per element, so padded positions are never read: for maxpool they never win (-inf),
// for avgpool they add zero and only change the divisor (count_include_pad true: kh*kw; false:
// positions inside the input). Window sums are accumulated in double, as the CPU reference does.
#include <cuda_runtime_api.h>

#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom {

struct Pool2dShape {
  int channels = 1, height = 1, width = 1;  // input per sample; output has the same channels
  int out_height = 1, out_width = 1;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0;
};

struct Pool2dArgs {
  const float* x = nullptr;  // [n, C, H, W]
  float* y = nullptr;        // [n, C, OH, OW]
  Pool2dShape shape;
  bool count_include_pad = true;  // avgpool only
};

struct PoolLaunch {
  int threads = 256;
  int max_blocks = 1;
};

PoolLaunch pool_plan(const Pool2dShape& shape, const DeviceLimits& limits);
void maxpool_forward(const Pool2dArgs& args, const PoolLaunch& launch, int n, cudaStream_t stream,
                     const std::string& context);
void avgpool_forward(const Pool2dArgs& args, const PoolLaunch& launch, int n, cudaStream_t stream,
                     const std::string& context);

}  // namespace engine::custom

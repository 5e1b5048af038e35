#pragma once
// conv2d_forward: direct convolution (cross-correlation, zero padding, any stride and asymmetric
// padding the format allows), bias and an optional activation fused in the epilogue.
//
// Main kernel: one thread block per (sample, spatial output tile, group of output channels). Per
// chunk of input channels the block stages the input patch its tile reads and the filters of its
// output channels in shared memory; each thread keeps kConvOcPerThread output channels of one
// output pixel in registers. When even one channel's patch and filters exceed the shared-memory
// limit (huge kernels), a plain direct kernel (one thread per output element, reading global
// memory) takes over. Both accumulate in double in the CPU reference's order (bias, then input
// channel, kernel row, kernel column), so results do not depend on the tiling.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom {

inline constexpr int kConvOcPerThread = 8;

struct Conv2dShape {
  int channels = 1, height = 1, width = 1;              // input [C, H, W] per sample
  int out_channels = 1, out_height = 1, out_width = 1;  // output [OC, OH, OW] per sample
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0;  // bottom/right padding is implied by out_height/out_width
};

// Chosen once per node at compile time.
struct Conv2dLaunch {
  bool tiled = true;
  // tiled: block = (tile_w, tile_h, oz) threads; each thread computes kConvOcPerThread channels of
  // one output pixel, so a block covers tile_h x tile_w pixels and oz * kConvOcPerThread channels.
  int tile_w = 1, tile_h = 1, oz = 1;
  int tiles_x = 1, tiles_y = 1, oc_groups = 1;
  int channels_per_chunk = 1;     // input channels staged in shared memory at once
  int patch_h = 1, patch_w = 1;   // input rows/columns a tile reads
  size_t shared_bytes = 0;
  // direct fallback: threads per block of the grid-stride kernel
  int threads = 256;
  int max_blocks = 1;             // cap of the grid-stride fallback's grid
};

struct Conv2dArgs {
  const float* x = nullptr;     // [n, C, H, W]
  const float* weight = nullptr;  // [OC, C, kh, kw]
  const float* bias = nullptr;  // [OC] or null
  float* y = nullptr;           // [n, OC, OH, OW]; must not overlap x
  Conv2dShape shape;
  Activation activation = Activation::None;
};

Conv2dLaunch conv2d_plan(const Conv2dShape& shape, const DeviceLimits& limits);
void conv2d_forward(const Conv2dArgs& args, const Conv2dLaunch& launch, int n, cudaStream_t stream,
                    const std::string& context);

}  // namespace engine::custom

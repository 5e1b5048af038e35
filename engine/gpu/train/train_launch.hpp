#pragma once
// What the training kernels' launchers share: the geometry of a windowed op (conv2d, pooling) and
// grid sizes. Host-only, no fmt: included from .cu files.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

// Member functions kernels call too (this header is also read by plain C++ files).
#ifdef __CUDACC__
#define ENGINE_TRAIN_HD __host__ __device__
#else
#define ENGINE_TRAIN_HD
#endif

namespace engine::gpu::train {

// One windowed node, per sample: input [in_c, in_h, in_w] -> output [out_c, out_h, out_w].
// Bottom/right padding is implied by the output size the planner computed.
struct WindowGeom {
  int in_c = 1, in_h = 1, in_w = 1;
  int out_c = 1, out_h = 1, out_w = 1;
  int kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0;
  bool count_include_pad = true;  // avgpool only
  ENGINE_TRAIN_HD long long in_size() const { return (long long)in_c * in_h * in_w; }
  ENGINE_TRAIN_HD long long out_size() const { return (long long)out_c * out_h * out_w; }
};

inline constexpr int kThreads = 256;  // threads per block of the element-wise (grid-stride) kernels

// Blocks for a grid-stride loop over `total` items: one item per thread up to a cap of 4096 blocks
// (the loops handle the rest). Never 0.
inline unsigned grid_for(long long total) {
  const long long blocks = (total + kThreads - 1) / kThreads;
  return unsigned(std::clamp<long long>(blocks, 1, 4096));
}

// The weight-gradient reductions' block: a fixed size, because the shape of their summation tree
// (part of the result's bits) follows from it. Never change it per device or per batch.
inline constexpr int kReduceThreads = 256;

}  // namespace engine::gpu::train

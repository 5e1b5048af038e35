#include "engine/custom/softmax.hpp"

#include <algorithm>
#include <cmath>

#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__global__ void softmax_forward_kernel(const float* x, float* y, int rows, int64_t K) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps_per_block = blockDim.x >> 5;
  // The row loop depends on the warp only: all 32 lanes take every shuffle together.
  for (int64_t row = int64_t(blockIdx.x) * warps_per_block + warp; row < rows;
       row += int64_t(gridDim.x) * warps_per_block) {
    const float* xr = x + row * K;
    float* yr = y + row * K;
    float m = -INFINITY;
    for (int64_t k = lane; k < K; k += 32) m = fmaxf(m, xr[k]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, off));
    const double md = double(m);
    double sum = 0.0;
    for (int64_t k = lane; k < K; k += 32) sum += exp(double(xr[k]) - md);
    // Butterfly: lane i adds v[i] + v[i ^ off], its partner v[i ^ off] + v[i], the same IEEE sum,
    // so every lane ends with the same, run-to-run identical total.
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
    for (int64_t k = lane; k < K; k += 32) yr[k] = float(exp(double(xr[k]) - md) / sum);
  }
}

}  // namespace

SoftmaxLaunch softmax_plan(int64_t, const DeviceLimits& limits) {
  SoftmaxLaunch l;
  l.warps_per_block = 8;
  l.max_blocks = std::max(limits.multiprocessors, 1) * 32;
  return l;
}

void softmax_forward(const float* x, float* y, int rows, int64_t K, const SoftmaxLaunch& l, cudaStream_t stream,
                     const std::string& context) {
  if (rows <= 0 || K <= 0) return;
  const int blocks = int(std::max<int64_t>(
      1, std::min<int64_t>((int64_t(rows) + l.warps_per_block - 1) / l.warps_per_block, l.max_blocks)));
  softmax_forward_kernel<<<blocks, l.warps_per_block * 32, 0, stream>>>(x, y, rows, K);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom

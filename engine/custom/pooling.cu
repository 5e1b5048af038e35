#include "engine/custom/pooling.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

struct Window {
  int64_t plane;  // (sample * C + channel)
  int top, left, p0, p1, q0, q1;
};

__device__ __forceinline__ Window window_of(int64_t i, const Pool2dShape& s) {
  Window win;
  const int ox = int(i % s.out_width);
  const int64_t t = i / s.out_width;
  const int oy = int(t % s.out_height);
  win.plane = t / s.out_height;
  win.top = oy * s.stride_h - s.pad_top;
  win.left = ox * s.stride_w - s.pad_left;
  win.p0 = max(0, -win.top);
  win.p1 = min(s.kernel_h, s.height - win.top);
  win.q0 = max(0, -win.left);
  win.q1 = min(s.kernel_w, s.width - win.left);
  return win;
}

__global__ void maxpool_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t total,
                                       Pool2dShape s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Window win = window_of(i, s);
    const float* xp = x + win.plane * s.height * s.width;
    float m = -INFINITY;  // padded positions are never visited: they behave as -inf
    for (int p = win.p0; p < win.p1; ++p)
      for (int q = win.q0; q < win.q1; ++q) m = fmaxf(m, xp[int64_t(win.top + p) * s.width + win.left + q]);
    y[i] = m;
  }
}

__global__ void avgpool_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t total,
                                       Pool2dShape s, bool count_include_pad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Window win = window_of(i, s);
    const float* xp = x + win.plane * s.height * s.width;
    double sum = 0.0;
    for (int p = win.p0; p < win.p1; ++p)
      for (int q = win.q0; q < win.q1; ++q) sum += double(xp[int64_t(win.top + p) * s.width + win.left + q]);
    const int inside = max(0, win.p1 - win.p0) * max(0, win.q1 - win.q0);
    const int divisor = count_include_pad ? s.kernel_h * s.kernel_w : inside;
    y[i] = divisor > 0 ? float(sum / double(divisor)) : 0.0f;
  }
}

int64_t output_elements(const Pool2dShape& s, int n) {
  return int64_t(n) * s.channels * s.out_height * s.out_width;
}

int blocks_for(int64_t total, const PoolLaunch& l) {
  return int(std::max<int64_t>(1, std::min<int64_t>((total + l.threads - 1) / l.threads, l.max_blocks)));
}

}  // namespace

PoolLaunch pool_plan(const Pool2dShape&, const DeviceLimits& limits) {
  PoolLaunch l;
  l.threads = 256;
  l.max_blocks = std::max(limits.multiprocessors, 1) * 32;
  return l;
}

void maxpool_forward(const Pool2dArgs& a, const PoolLaunch& l, int n, cudaStream_t stream,
                     const std::string& context) {
  const int64_t total = output_elements(a.shape, n);
  if (total <= 0) return;
  maxpool_forward_kernel<<<blocks_for(total, l), l.threads, 0, stream>>>(a.x, a.y, total, a.shape);
  CUDA_CHECK_LAUNCH(context);
}

void avgpool_forward(const Pool2dArgs& a, const PoolLaunch& l, int n, cudaStream_t stream,
                     const std::string& context) {
  const int64_t total = output_elements(a.shape, n);
  if (total <= 0) return;
  avgpool_forward_kernel<<<blocks_for(total, l), l.threads, 0, stream>>>(a.x, a.y, total, a.shape,
                                                                         a.count_include_pad);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom

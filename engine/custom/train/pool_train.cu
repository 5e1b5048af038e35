// Pooling training kernels (fp32, --fmad=false).
#include <math_constants.h>

#include "engine/custom/train/pool_train.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::train {

using namespace gpu::train;  // the GPU trainers' shared part
namespace {

// The valid rows [p0, p1) and columns [q0, q1) of output (i, j)'s window, as host_ops.hpp's
// for_each_window clips it.
struct Clip {
  int top, left, p0, p1, q0, q1;
};
__device__ inline Clip clip(const WindowGeom& g, int i, int j) {
  Clip c;
  c.top = i * g.sh - g.pt;
  c.left = j * g.sw - g.pl;
  c.p0 = max(0, -c.top);
  c.p1 = min(g.kh, g.in_h - c.top);
  c.q0 = max(0, -c.left);
  c.q1 = min(g.kw, g.in_w - c.left);
  return c;
}

// host_ops.hpp's avgpool_divisor, in float from the same double.
__device__ inline float divisor(const WindowGeom& g, int i, int j) {
  if (g.count_include_pad) return float(double(g.kh) * double(g.kw));
  const Clip c = clip(g, i, j);
  return float(double(max(0, c.p1 - c.p0) * max(0, c.q1 - c.q0)));
}

// Decomposes a flat index over [n, C, H, W].
__device__ inline void split(long long idx, int C, int H, int W, long long& s, int& c, int& h, int& w) {
  w = int(idx % W);
  long long r = idx / W;
  h = int(r % H);
  r /= H;
  c = int(r % C);
  s = r / C;
}

// Outputs whose window holds input row yy (column xx): [first, last) of i (j).
__device__ inline void covering(int pos, int pad, int k, int stride, int outs, int& first, int& last) {
  const int hi = pos + pad;          // i * stride <= hi
  const int lo = pos + pad - k + 1;  // i * stride >= lo
  first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  last = min(outs, hi / stride + 1);
}

__global__ void avgpool_forward_kernel(const float* __restrict__ x, float* __restrict__ y, long long total,
                                       WindowGeom g) {
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    long long s;
    int c, i, j;
    split(idx, g.out_c, g.out_h, g.out_w, s, c, i, j);
    const Clip w = clip(g, i, j);
    const float* xc = x + s * g.in_size() + (long long)c * g.in_h * g.in_w;
    float sum = 0.0f;
    for (int p = w.p0; p < w.p1; ++p)
      for (int q = w.q0; q < w.q1; ++q) sum = sum + xc[(long long)(w.top + p) * g.in_w + w.left + q];
    const float d = divisor(g, i, j);
    y[idx] = d > 0.0f ? sum / d : 0.0f;
  }
}

__global__ void avgpool_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx, long long total,
                                        WindowGeom g, bool accumulate) {
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    long long s;
    int c, yy, xx;
    split(idx, g.in_c, g.in_h, g.in_w, s, c, yy, xx);
    int i0, i1, j0, j1;
    covering(yy, g.pt, g.kh, g.sh, g.out_h, i0, i1);
    covering(xx, g.pl, g.kw, g.sw, g.out_w, j0, j1);
    const float* dyc = dy + s * g.out_size() + (long long)c * g.out_h * g.out_w;
    float acc = accumulate ? dx[idx] : 0.0f;
    for (int i = i0; i < i1; ++i)
      for (int j = j0; j < j1; ++j) {
        const float d = divisor(g, i, j);
        if (!(d > 0.0f)) continue;
        acc = acc + dyc[(long long)i * g.out_w + j] / d;
      }
    dx[idx] = acc;
  }
}

__global__ void maxpool_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int* __restrict__ arg,
                                       long long total, WindowGeom g) {
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    long long s;
    int c, i, j;
    split(idx, g.out_c, g.out_h, g.out_w, s, c, i, j);
    const Clip w = clip(g, i, j);
    const float* xs = x + s * g.in_size();
    int best = -1;
    float m = -CUDART_INF_F;
    for (int p = w.p0; p < w.p1; ++p)
      for (int q = w.q0; q < w.q1; ++q) {
        const int k = (c * g.in_h + w.top + p) * g.in_w + w.left + q;
        if (best < 0 || xs[k] > m) {
          m = xs[k];
          best = k;
        }
      }
    arg[idx] = best;
    y[idx] = best >= 0 ? xs[best] : -CUDART_INF_F;
  }
}

__global__ void maxpool_backward_kernel(const float* __restrict__ dy, const int* __restrict__ arg,
                                        float* __restrict__ dx, long long total, WindowGeom g, bool accumulate) {
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    long long s;
    int c, yy, xx;
    split(idx, g.in_c, g.in_h, g.in_w, s, c, yy, xx);
    const int k = (c * g.in_h + yy) * g.in_w + xx;
    int i0, i1, j0, j1;
    covering(yy, g.pt, g.kh, g.sh, g.out_h, i0, i1);
    covering(xx, g.pl, g.kw, g.sw, g.out_w, j0, j1);
    const long long base = s * g.out_size() + (long long)c * g.out_h * g.out_w;
    float acc = accumulate ? dx[idx] : 0.0f;
    for (int i = i0; i < i1; ++i)
      for (int j = j0; j < j1; ++j) {
        const long long o = base + (long long)i * g.out_w + j;
        if (arg[o] == k) acc = acc + dy[o];
      }
    dx[idx] = acc;
  }
}

}  // namespace

void avgpool_forward(const float* x, float* y, int n, const WindowGeom& g, cudaStream_t stream) {
  const long long total = (long long)n * g.out_size();
  avgpool_forward_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, y, total, g);
  CUDA_CHECK_LAUNCH("train: avgpool forward");
}

void avgpool_backward(const float* dy, float* dx, int n, const WindowGeom& g, bool accumulate, cudaStream_t stream) {
  const long long total = (long long)n * g.in_size();
  avgpool_backward_kernel<<<grid_for(total), kThreads, 0, stream>>>(dy, dx, total, g, accumulate);
  CUDA_CHECK_LAUNCH("train: avgpool backward");
}

void maxpool_forward(const float* x, float* y, int* argmax, int n, const WindowGeom& g, cudaStream_t stream) {
  const long long total = (long long)n * g.out_size();
  maxpool_forward_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, y, argmax, total, g);
  CUDA_CHECK_LAUNCH("train: maxpool forward");
}

void maxpool_backward(const float* dy, const int* argmax, float* dx, int n, const WindowGeom& g, bool accumulate,
                      cudaStream_t stream) {
  const long long total = (long long)n * g.in_size();
  maxpool_backward_kernel<<<grid_for(total), kThreads, 0, stream>>>(dy, argmax, dx, total, g, accumulate);
  CUDA_CHECK_LAUNCH("train: maxpool backward");
}

}  // namespace engine::custom::train

// conv2d training kernels (fp32, no FMA contraction: built with --fmad=false, so each product is
// rounded before its sum as in host_ops.hpp's -ffp-contract=off code).
#include "engine/custom/train/activation.cuh"
#include "engine/custom/train/block_reduce.cuh"
#include "engine/custom/train/conv_train.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::train {
namespace {

__global__ void conv_forward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ b, float* __restrict__ y, long long total,
                                    WindowGeom g, int act) {
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    const int j = int(idx % g.out_w);
    long long r = idx / g.out_w;
    const int i = int(r % g.out_h);
    r /= g.out_h;
    const int o = int(r % g.out_c);
    const long long s = r / g.out_c;
    const float* xs = x + s * g.in_size();
    const float* wo = w + (long long)o * g.in_c * g.kh * g.kw;
    float acc = b ? b[o] : 0.0f;
    for (int c = 0; c < g.in_c; ++c)
      for (int p = 0; p < g.kh; ++p) {
        const int yy = i * g.sh + p - g.pt;
        if (yy < 0 || yy >= g.in_h) continue;
        const float* xrow = xs + ((long long)c * g.in_h + yy) * g.in_w;
        const float* wrow = wo + ((long long)c * g.kh + p) * g.kw;
        for (int q = 0; q < g.kw; ++q) {
          const int xx = j * g.sw + q - g.pl;
          if (xx < 0 || xx >= g.in_w) continue;
          acc = acc + xrow[xx] * wrow[q];
        }
      }
    y[idx] = activate(act, acc);
  }
}

// One thread per input element, gathering the output positions whose window covers it in
// host_ops.hpp's order: taps (p, q) ascending, each tap's term being its sum over output channels o
// ascending (the host's dcol = W^T dy, then col2im).
__global__ void conv_backward_input_kernel(const float* __restrict__ dy, const float* __restrict__ act_y, int act,
                                           const float* __restrict__ w, float* __restrict__ dx, long long total,
                                           WindowGeom g, bool accumulate) {
  const long long plane = (long long)g.out_h * g.out_w;
  const long long w_o = (long long)g.in_c * g.kh * g.kw;  // weight stride between output channels
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    const int xx = int(idx % g.in_w);
    long long r = idx / g.in_w;
    const int yy = int(r % g.in_h);
    r /= g.in_h;
    const int c = int(r % g.in_c);
    const long long s = r / g.in_c;
    const float* dys = dy + s * g.out_size();
    const float* ys = act >= 0 ? act_y + s * g.out_size() : nullptr;
    float acc = accumulate ? dx[idx] : 0.0f;
    for (int p = 0; p < g.kh; ++p) {
      const int ti = yy + g.pt - p;  // = i * sh
      if (ti < 0 || ti % g.sh != 0) continue;
      const int i = ti / g.sh;
      if (i >= g.out_h) continue;
      for (int q = 0; q < g.kw; ++q) {
        const int tj = xx + g.pl - q;
        if (tj < 0 || tj % g.sw != 0) continue;
        const int j = tj / g.sw;
        if (j >= g.out_w) continue;
        const long long at = (long long)i * g.out_w + j;
        const float* wk = w + ((long long)c * g.kh + p) * g.kw + q;
        float t = 0.0f;
        if (act < 0) {
          for (int o = 0; o < g.out_c; ++o) t = t + wk[o * w_o] * dys[at + o * plane];
        } else {
          for (int o = 0; o < g.out_c; ++o)
            t = t + wk[o * w_o] * activation_grad(act, dys[at + o * plane], ys[at + o * plane]);
        }
        acc = acc + t;
      }
    }
    dx[idx] = acc;
  }
}

// Block e < weights: weight element e = (o, c, p, q); block weights + o: bias o.
__global__ void conv_backward_params_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                            const float* __restrict__ act_y, int act, float* __restrict__ dw,
                                            float* __restrict__ db, int n, WindowGeom g, int weights) {
  __shared__ float partial[kReduceThreads];
  const int e = blockIdx.x;
  const int plane = g.out_h * g.out_w;
  float acc = 0.0f;
  if (e < weights) {
    const int q = e % g.kw, p = (e / g.kw) % g.kh, c = (e / (g.kw * g.kh)) % g.in_c, o = e / (g.kw * g.kh * g.in_c);
    for (int s = 0; s < n; ++s) {
      const long long base = s * g.out_size() + (long long)o * plane;
      const float* dyo = dy + base;
      const float* yo = act >= 0 ? act_y + base : nullptr;
      const float* xc = x + s * g.in_size() + (long long)c * g.in_h * g.in_w;
      for (int pos = threadIdx.x; pos < plane; pos += kReduceThreads) {
        const int i = pos / g.out_w, j = pos - (pos / g.out_w) * g.out_w;
        const int yy = i * g.sh + p - g.pt, xx = j * g.sw + q - g.pl;
        if (yy < 0 || yy >= g.in_h || xx < 0 || xx >= g.in_w) continue;
        const float d = act >= 0 ? activation_grad(act, dyo[pos], yo[pos]) : dyo[pos];
        acc = acc + d * xc[(long long)yy * g.in_w + xx];
      }
    }
  } else {
    const int o = e - weights;
    for (int s = 0; s < n; ++s) {
      const long long base = s * g.out_size() + (long long)o * plane;
      const float* dyo = dy + base;
      const float* yo = act >= 0 ? act_y + base : nullptr;
      for (int pos = threadIdx.x; pos < plane; pos += kReduceThreads)
        acc = acc + (act >= 0 ? activation_grad(act, dyo[pos], yo[pos]) : dyo[pos]);
    }
  }
  const float total = block_tree_sum(acc, partial);
  if (threadIdx.x == 0) {
    if (e < weights) dw[e] = total;
    else db[e - weights] = total;
  }
}

}  // namespace

void conv_forward(const float* x, const float* w, const float* b, float* y, int n, const WindowGeom& g, int act,
                  cudaStream_t stream) {
  const long long total = (long long)n * g.out_size();
  conv_forward_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, w, b, y, total, g, act);
  CUDA_CHECK_LAUNCH("train: conv2d forward");
}

void conv_backward_input(const float* dy, const float* act_y, int act, const float* w, float* dx, int n,
                         const WindowGeom& g, bool accumulate, cudaStream_t stream) {
  const long long total = (long long)n * g.in_size();
  conv_backward_input_kernel<<<grid_for(total), kThreads, 0, stream>>>(dy, act_y, act, w, dx, total, g, accumulate);
  CUDA_CHECK_LAUNCH("train: conv2d input gradient");
}

void conv_backward_params(const float* x, const float* dy, const float* act_y, int act, float* dw, float* db, int n,
                          const WindowGeom& g, cudaStream_t stream) {
  const int weights = g.out_c * g.in_c * g.kh * g.kw;
  const int blocks = weights + (db ? g.out_c : 0);
  conv_backward_params_kernel<<<blocks, kReduceThreads, 0, stream>>>(x, dy, act_y, act, dw, db, n, g, weights);
  CUDA_CHECK_LAUNCH("train: conv2d weight gradient");
}

}  // namespace engine::custom::train

// conv2d training kernels (fp32, no FMA contraction: built with --fmad=false, so each product is
// rounded before its sum as in host_ops.hpp's -ffp-contract=off code).
#include "engine/gpu/train/activation.cuh"
#include "engine/gpu/train/block_reduce.cuh"
#include "engine/custom/train/conv_train.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::train {

using namespace gpu::train;  // the GPU trainers' shared part
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

namespace {

// Blocks the stage-1 grid aims at: two per SM of a 132-SM GPU, fixed (never per device: the
// chunking is part of the result's bits).
constexpr int kParamBlocksTarget = 264;

int param_chunks(const WindowGeom& g, int n) {
  const int pairs = g.out_c * g.in_c;
  return std::max(1, std::min(n, (kParamBlocksTarget + pairs - 1) / pairs));
}

bool tiled_params(const WindowGeom& g) { return g.kh == g.kw && g.kh >= 1 && g.kh <= 5; }

template <int K>
__global__ void __launch_bounds__(kReduceThreads)
    conv_params_partial_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                               const float* __restrict__ act_y, int act, float* __restrict__ partials, int n,
                               WindowGeom g, int chunks) {
  constexpr int KK = K * K;
  __shared__ float red[KK + 1][kReduceThreads];
  const int pair = blockIdx.x / chunks, chunk = blockIdx.x - pair * chunks;
  const int o = pair / g.in_c, c = pair - o * g.in_c;
  const int s0 = int((long long)n * chunk / chunks), s1 = int((long long)n * (chunk + 1) / chunks);
  const int plane = g.out_h * g.out_w;
  float acc[KK + 1];
#pragma unroll
  for (int k = 0; k <= KK; ++k) acc[k] = 0.0f;
  const long long count = (long long)(s1 - s0) * plane;
  for (long long idx = threadIdx.x; idx < count; idx += kReduceThreads) {
    const int s = s0 + int(idx / plane), pos = int(idx % plane);
    const long long at = s * g.out_size() + (long long)o * plane + pos;
    const float d = act >= 0 ? activation_grad(act, dy[at], act_y[at]) : dy[at];
    const int i = pos / g.out_w, j = pos - i * g.out_w;
    const float* xc = x + s * g.in_size() + (long long)c * g.in_h * g.in_w;
    const int y0 = i * g.sh - g.pt, x0 = j * g.sw - g.pl;
#pragma unroll
    for (int p = 0; p < K; ++p) {
      const int yy = y0 + p;
#pragma unroll
      for (int q = 0; q < K; ++q) {
        const int xx = x0 + q;
        const bool inside = yy >= 0 && yy < g.in_h && xx >= 0 && xx < g.in_w;
        const float v = inside ? xc[(long long)yy * g.in_w + xx] : 0.0f;
        acc[p * K + q] = acc[p * K + q] + d * v;
      }
    }
    acc[KK] = acc[KK] + d;
  }
  // KK + 1 fixed trees at once: halve every row in the same steps.
#pragma unroll
  for (int k = 0; k <= KK; ++k) red[k][threadIdx.x] = acc[k];
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half >>= 1) {
    for (int e = threadIdx.x; e < (KK + 1) * half; e += kReduceThreads) {
      const int k = e / half, t = e - k * half;
      red[k][t] = red[k][t] + red[k][t + half];
    }
    __syncthreads();
  }
  // partials: [chunk][o][c][p][q] for the weights, then [chunk][o] for the bias (from c = 0 only).
  const long long weights = (long long)g.out_c * g.in_c * KK;
  for (int k = threadIdx.x; k < KK; k += kReduceThreads) partials[chunk * weights + (long long)pair * KK + k] = red[k][0];
  if (c == 0 && threadIdx.x == 0) partials[(long long)chunks * weights + (long long)chunk * g.out_c + o] = red[KK][0];
}

// Each weight (and bias) element: its chunks added in chunk order.
__global__ void conv_params_sum_kernel(const float* __restrict__ partials, float* __restrict__ dw,
                                       float* __restrict__ db, long long weights, int out_c, int chunks) {
  const long long total = weights + (db ? out_c : 0);
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    float v = 0.0f;
    if (e < weights) {
      for (int ch = 0; ch < chunks; ++ch) v = v + partials[ch * weights + e];
      dw[e] = v;
    } else {
      const long long o = e - weights;
      for (int ch = 0; ch < chunks; ++ch) v = v + partials[chunks * weights + ch * out_c + o];
      db[o] = v;
    }
  }
}

}  // namespace

long long conv_param_partials(const WindowGeom& g, int max_batch) {
  if (!tiled_params(g)) return 0;
  int most = 1;  // the largest chunk count any n <= max_batch uses
  for (int n = 1; n <= max_batch; ++n) most = std::max(most, param_chunks(g, n));
  return (long long)most * ((long long)g.out_c * g.in_c * g.kh * g.kw + g.out_c);
}

void conv_backward_params(const float* x, const float* dy, const float* act_y, int act, float* dw, float* db, int n,
                          const WindowGeom& g, float* partials, cudaStream_t stream) {
  const int weights = g.out_c * g.in_c * g.kh * g.kw;
  if (!tiled_params(g) || partials == nullptr) {
    const int blocks = weights + (db ? g.out_c : 0);
    conv_backward_params_kernel<<<blocks, kReduceThreads, 0, stream>>>(x, dy, act_y, act, dw, db, n, g, weights);
    CUDA_CHECK_LAUNCH("train: conv2d weight gradient");
    return;
  }
  const int chunks = param_chunks(g, n);
  const unsigned blocks = unsigned(g.out_c * g.in_c * chunks);
  switch (g.kh) {
    case 1: conv_params_partial_kernel<1><<<blocks, kReduceThreads, 0, stream>>>(x, dy, act_y, act, partials, n, g, chunks); break;
    case 2: conv_params_partial_kernel<2><<<blocks, kReduceThreads, 0, stream>>>(x, dy, act_y, act, partials, n, g, chunks); break;
    case 3: conv_params_partial_kernel<3><<<blocks, kReduceThreads, 0, stream>>>(x, dy, act_y, act, partials, n, g, chunks); break;
    case 4: conv_params_partial_kernel<4><<<blocks, kReduceThreads, 0, stream>>>(x, dy, act_y, act, partials, n, g, chunks); break;
    default: conv_params_partial_kernel<5><<<blocks, kReduceThreads, 0, stream>>>(x, dy, act_y, act, partials, n, g, chunks); break;
  }
  CUDA_CHECK_LAUNCH("train: conv2d weight gradient (partial sums)");
  conv_params_sum_kernel<<<grid_for(weights + g.out_c), kThreads, 0, stream>>>(partials, dw, db, weights, g.out_c, chunks);
  CUDA_CHECK_LAUNCH("train: conv2d weight gradient (chunk sums)");
}

}  // namespace engine::custom::train

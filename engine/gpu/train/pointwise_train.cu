// Element-wise training kernels (fp32, --fmad=false, accurate tanhf/expf).
#include "engine/gpu/train/activation.cuh"
#include "engine/gpu/train/block_reduce.cuh"
#include "engine/gpu/train/pointwise_train.hpp"
#include "engine/gpu/train/train_launch.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::gpu::train {
namespace {

#define GRID_STRIDE(idx, total)                                                                 \
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < (total); \
       idx += (long long)gridDim.x * blockDim.x)

__global__ void activation_forward_kernel(int op, const float* __restrict__ x, float* __restrict__ y, long long count) {
  GRID_STRIDE(i, count) y[i] = activate(op, x[i]);
}

__global__ void activation_backward_kernel(int op, const float* __restrict__ x, const float* __restrict__ y,
                                           const float* __restrict__ dy, float* __restrict__ dx, long long count,
                                           bool accumulate) {
  GRID_STRIDE(i, count) {
    const float prev = accumulate ? dx[i] : 0.0f;
    // relu from its input as the host does (x > 0); the same as from y.
    const float d = op == int(Pointwise::Relu) ? (x[i] > 0.0f ? dy[i] : 0.0f) : activation_grad(op, dy[i], y[i]);
    dx[i] = prev + d;
  }
}

__global__ void add_forward_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y,
                                   long long count) {
  GRID_STRIDE(i, count) y[i] = a[i] + b[i];
}

__global__ void add_gradient_kernel(const float* __restrict__ dy, float* __restrict__ dx, long long count,
                                    bool accumulate) {
  GRID_STRIDE(i, count) dx[i] = (accumulate ? dx[i] : 0.0f) + dy[i];
}

__global__ void concat_forward_kernel(const float* __restrict__ part, float* __restrict__ y, long long count,
                                      long long part_elements, long long offset, long long total_elements) {
  GRID_STRIDE(i, count) {
    const long long s = i / part_elements, k = i - s * part_elements;
    y[s * total_elements + offset + k] = part[i];
  }
}

__global__ void concat_backward_kernel(const float* __restrict__ dy, float* __restrict__ dpart, long long count,
                                       long long part_elements, long long offset, long long total_elements,
                                       bool accumulate) {
  GRID_STRIDE(i, count) {
    const long long s = i / part_elements, k = i - s * part_elements;
    dpart[i] = (accumulate ? dpart[i] : 0.0f) + dy[s * total_elements + offset + k];
  }
}

__global__ void scale_shift_forward_kernel(const float* __restrict__ x, const float* __restrict__ scale,
                                           const float* __restrict__ shift, float* __restrict__ y, long long count,
                                           long long channels, long long inner) {
  GRID_STRIDE(i, count) {
    const long long c = (i / inner) % channels;
    y[i] = x[i] * scale[c] + shift[c];
  }
}

__global__ void scale_shift_backward_input_kernel(const float* __restrict__ dy, const float* __restrict__ scale,
                                                  float* __restrict__ dx, long long count, long long channels,
                                                  long long inner, bool accumulate) {
  GRID_STRIDE(i, count) {
    const long long c = (i / inner) % channels;
    dx[i] = (accumulate ? dx[i] : 0.0f) + dy[i] * scale[c];
  }
}

// Block c: channel c, its threads strided over (sample, element) pairs.
__global__ void scale_shift_backward_params_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                                   float* __restrict__ dscale, float* __restrict__ dshift, int n,
                                                   long long channels, long long inner) {
  __shared__ float partial[kReduceThreads];
  const long long c = blockIdx.x;
  float a = 0.0f, b = 0.0f;
  for (int s = 0; s < n; ++s) {
    const long long base = (s * channels + c) * inner;
    for (long long e = threadIdx.x; e < inner; e += kReduceThreads) {
      a = a + dy[base + e] * x[base + e];
      b = b + dy[base + e];
    }
  }
  const float ta = block_tree_sum(a, partial);
  const float tb = block_tree_sum(b, partial);
  if (threadIdx.x == 0) {
    dscale[c] = ta;
    dshift[c] = tb;
  }
}

__global__ void softmax_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int n, long long k) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const float* xs = x + s * k;
  float* ys = y + s * k;
  float m = xs[0];
  for (long long i = 1; i < k; ++i) m = xs[i] > m ? xs[i] : m;  // std::max_element's value
  float sum = 0.0f;
  for (long long i = 0; i < k; ++i) {
    ys[i] = expf(xs[i] - m);
    sum = sum + ys[i];
  }
  for (long long i = 0; i < k; ++i) ys[i] = ys[i] / sum;
}

__global__ void softmax_backward_kernel(const float* __restrict__ y, const float* __restrict__ dy,
                                        float* __restrict__ dx, int n, long long k, bool accumulate) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const float *ys = y + s * k, *dys = dy + s * k;
  float* dxs = dx + s * k;
  float dot = 0.0f;
  for (long long i = 0; i < k; ++i) dot = dot + dys[i] * ys[i];
  for (long long i = 0; i < k; ++i) dxs[i] = (accumulate ? dxs[i] : 0.0f) + ys[i] * (dys[i] - dot);
}

}  // namespace

void activation_forward(Pointwise op, const float* x, float* y, long long count, cudaStream_t stream) {
  activation_forward_kernel<<<grid_for(count), kThreads, 0, stream>>>(int(op), x, y, count);
  CUDA_CHECK_LAUNCH("train: activation forward");
}

void activation_backward(Pointwise op, const float* x, const float* y, const float* dy, float* dx, long long count,
                         bool accumulate, cudaStream_t stream) {
  activation_backward_kernel<<<grid_for(count), kThreads, 0, stream>>>(int(op), x, y, dy, dx, count, accumulate);
  CUDA_CHECK_LAUNCH("train: activation backward");
}

void add_forward(const float* a, const float* b, float* y, long long count, cudaStream_t stream) {
  add_forward_kernel<<<grid_for(count), kThreads, 0, stream>>>(a, b, y, count);
  CUDA_CHECK_LAUNCH("train: add forward");
}

void add_gradient(const float* dy, float* dx, long long count, bool accumulate, cudaStream_t stream) {
  add_gradient_kernel<<<grid_for(count), kThreads, 0, stream>>>(dy, dx, count, accumulate);
  CUDA_CHECK_LAUNCH("train: add backward");
}

void concat_forward(const float* part, float* y, int n, long long part_elements, long long offset,
                    long long total_elements, cudaStream_t stream) {
  const long long count = (long long)n * part_elements;
  concat_forward_kernel<<<grid_for(count), kThreads, 0, stream>>>(part, y, count, part_elements, offset,
                                                                   total_elements);
  CUDA_CHECK_LAUNCH("train: concat forward");
}

void concat_backward(const float* dy, float* dpart, int n, long long part_elements, long long offset,
                     long long total_elements, bool accumulate, cudaStream_t stream) {
  const long long count = (long long)n * part_elements;
  concat_backward_kernel<<<grid_for(count), kThreads, 0, stream>>>(dy, dpart, count, part_elements, offset,
                                                                    total_elements, accumulate);
  CUDA_CHECK_LAUNCH("train: concat backward");
}

void scale_shift_forward(const float* x, const float* scale, const float* shift, float* y, int n, long long channels,
                         long long inner, cudaStream_t stream) {
  const long long count = (long long)n * channels * inner;
  scale_shift_forward_kernel<<<grid_for(count), kThreads, 0, stream>>>(x, scale, shift, y, count, channels, inner);
  CUDA_CHECK_LAUNCH("train: scale_shift forward");
}

void scale_shift_backward_input(const float* dy, const float* scale, float* dx, int n, long long channels,
                                long long inner, bool accumulate, cudaStream_t stream) {
  const long long count = (long long)n * channels * inner;
  scale_shift_backward_input_kernel<<<grid_for(count), kThreads, 0, stream>>>(dy, scale, dx, count, channels, inner,
                                                                              accumulate);
  CUDA_CHECK_LAUNCH("train: scale_shift input gradient");
}

void scale_shift_backward_params(const float* x, const float* dy, float* dscale, float* dshift, int n,
                                 long long channels, long long inner, cudaStream_t stream) {
  scale_shift_backward_params_kernel<<<unsigned(channels), kReduceThreads, 0, stream>>>(x, dy, dscale, dshift, n,
                                                                                      channels, inner);
  CUDA_CHECK_LAUNCH("train: scale_shift parameter gradients");
}

void softmax_forward(const float* x, float* y, int n, long long k, cudaStream_t stream) {
  softmax_forward_kernel<<<unsigned((n + 127) / 128), 128, 0, stream>>>(x, y, n, k);
  CUDA_CHECK_LAUNCH("train: softmax forward");
}

void softmax_backward(const float* y, const float* dy, float* dx, int n, long long k, bool accumulate,
                      cudaStream_t stream) {
  softmax_backward_kernel<<<unsigned((n + 127) / 128), 128, 0, stream>>>(y, dy, dx, n, k, accumulate);
  CUDA_CHECK_LAUNCH("train: softmax backward");
}

}  // namespace engine::gpu::train

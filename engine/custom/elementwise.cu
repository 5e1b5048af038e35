#include "engine/custom/elementwise.hpp"

#include <algorithm>

#include "engine/custom/device_math.cuh"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

// `x` and `y` may be the same block (elementwise in place is safe): no __restrict__ here.
__global__ void activation_forward_kernel(const float* x, float* y, int64_t count, Activation act) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = apply_activation(x[i], act);
}

__global__ void add_forward_kernel(const float* a, const float* b, float* y, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = a[i] + b[i];
}

// The product of two floats is exact in double: one rounding in the double sum, one to float,
// the reference's arithmetic exactly.
__global__ void scale_shift_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                           const float* __restrict__ scale, const float* __restrict__ shift,
                                           int64_t count, int64_t channels, int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / inner) % channels;
    y[i] = float(__dadd_rn(double(x[i]) * double(scale[c]), double(shift[c])));
  }
}

// One thread per element of the input; consecutive threads write consecutive floats of a sample's
// slice, so both sides stay coalesced.
__global__ void slice_copy_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t count,
                                          int64_t x_elements, int64_t y_elements, int64_t offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t sample = i / x_elements, e = i - sample * x_elements;
    y[sample * y_elements + offset + e] = x[i];
  }
}

int blocks_for(int64_t count, const ElementwiseLaunch& l) {
  return int(std::max<int64_t>(1, std::min<int64_t>((count + l.threads - 1) / l.threads, l.max_blocks)));
}

}  // namespace

ElementwiseLaunch elementwise_plan(const DeviceLimits& limits) {
  ElementwiseLaunch l;
  l.threads = 256;
  l.max_blocks = std::max(limits.multiprocessors, 1) * 32;
  return l;
}

void activation_forward(const float* x, float* y, int64_t count, Activation act, const ElementwiseLaunch& l,
                        cudaStream_t stream, const std::string& context) {
  if (count <= 0) return;
  activation_forward_kernel<<<blocks_for(count, l), l.threads, 0, stream>>>(x, y, count, act);
  CUDA_CHECK_LAUNCH(context);
}

void add_forward(const float* a, const float* b, float* y, int64_t count, const ElementwiseLaunch& l,
                 cudaStream_t stream, const std::string& context) {
  if (count <= 0) return;
  add_forward_kernel<<<blocks_for(count, l), l.threads, 0, stream>>>(a, b, y, count);
  CUDA_CHECK_LAUNCH(context);
}

void scale_shift_forward(const float* x, float* y, const float* scale, const float* shift, int64_t samples,
                         int64_t channels, int64_t inner, const ElementwiseLaunch& l, cudaStream_t stream,
                         const std::string& context) {
  const int64_t count = samples * channels * inner;
  if (count <= 0) return;
  scale_shift_forward_kernel<<<blocks_for(count, l), l.threads, 0, stream>>>(x, y, scale, shift, count, channels,
                                                                             inner);
  CUDA_CHECK_LAUNCH(context);
}

void slice_copy_forward(const float* x, float* y, int64_t samples, int64_t x_elements, int64_t y_elements,
                        int64_t offset, const ElementwiseLaunch& l, cudaStream_t stream, const std::string& context) {
  const int64_t count = samples * x_elements;
  if (count <= 0) return;
  slice_copy_forward_kernel<<<blocks_for(count, l), l.threads, 0, stream>>>(x, y, count, x_elements, y_elements,
                                                                            offset);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom

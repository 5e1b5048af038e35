// Element-per-thread conversions between float32 NCHW and the storage type / layout; see convert.hpp.
// These run once per batch on the input and the outputs only (a few bytes per image next to the
// network's activations), so a plain grid-stride loop is enough.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/gpu/convert.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::gpu {
namespace {

template <typename T>
__device__ T from_f32(float x);
template <>
__device__ float from_f32<float>(float x) { return x; }
template <>
__device__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ float to_f32(float x) { return x; }
__device__ float to_f32(__half x) { return __half2float(x); }
__device__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// i indexes the NCHW element; its storage index is the same (NCHW) or permuted (NHWC).
__device__ int64_t storage_index(int64_t i, int channels, int pixels, bool nhwc) {
  if (!nhwc) return i;
  const int64_t per_sample = int64_t(channels) * pixels;
  const int64_t n = i / per_sample, r = i % per_sample;
  const int64_t c = r / pixels, p = r % pixels;
  return n * per_sample + p * channels + c;
}

template <typename T>
__global__ void from_f32_kernel(const float* in, T* out, int64_t count, int channels, int pixels, bool nhwc) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[storage_index(i, channels, pixels, nhwc)] = from_f32<T>(in[i]);
}

template <typename T>
__global__ void to_f32_kernel(const T* in, float* out, int64_t count, int channels, int pixels, bool nhwc) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_f32(in[storage_index(i, channels, pixels, nhwc)]);
}

dim3 grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return dim3(unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096));
}

}  // namespace

void convert_from_f32(const float* in, void* out, StorageType type, bool nhwc, const ValueShape& s,
                      cudaStream_t stream) {
  const int64_t count = s.n * s.channels * s.pixels;
  if (count == 0) return;
  switch (type) {
    case StorageType::F32:
      from_f32_kernel<<<grid_for(count), 256, 0, stream>>>(in, static_cast<float*>(out), count, s.channels, s.pixels, nhwc);
      break;
    case StorageType::F16:
      from_f32_kernel<<<grid_for(count), 256, 0, stream>>>(in, static_cast<__half*>(out), count, s.channels, s.pixels, nhwc);
      break;
    case StorageType::BF16:
      from_f32_kernel<<<grid_for(count), 256, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), count, s.channels,
                                                           s.pixels, nhwc);
      break;
  }
  CUDA_CHECK(cudaGetLastError());
}

void convert_to_f32(const void* in, StorageType type, bool nhwc, float* out, const ValueShape& s, cudaStream_t stream) {
  const int64_t count = s.n * s.channels * s.pixels;
  if (count == 0) return;
  switch (type) {
    case StorageType::F32:
      to_f32_kernel<<<grid_for(count), 256, 0, stream>>>(static_cast<const float*>(in), out, count, s.channels, s.pixels, nhwc);
      break;
    case StorageType::F16:
      to_f32_kernel<<<grid_for(count), 256, 0, stream>>>(static_cast<const __half*>(in), out, count, s.channels, s.pixels, nhwc);
      break;
    case StorageType::BF16:
      to_f32_kernel<<<grid_for(count), 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), out, count, s.channels,
                                                         s.pixels, nhwc);
      break;
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace engine::gpu

// The tensor-core chain's kernels and launchers (the layers: tc_chain.cuh, tc_int8_chain.cuh; the
// family and the layouts: tc_chain_params.hpp). One persistent block per SM: the dense weights fill
// most of its shared memory.
#include "engine/custom/fused/tc_chain.cuh"
#include "engine/custom/fused/tc_int8_chain.cuh"
#include "engine/custom/fused/tc_chain_launch.hpp"
#include "engine/gpu/cuda_check.hpp"

#include <cstdint>

namespace engine::custom::tc {
namespace {

// Version 1, the simple one, reads every layer's activation and pool from the parameters.
template <class T, bool kFast>
__global__ void __launch_bounds__(kSoloWarps * 32, 1)
    tc_solo_kernel(const float* __restrict__ x, const __grid_constant__ TcChainParams P, float* __restrict__ y, int n,
                   int /*tile_images: 16*/) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  tc_solo_body<T, kFast, kSigGeneric>(x, P, y, n, reinterpret_cast<T*>(smem_bytes), int(threadIdx.x), int(blockIdx.x),
                                      int(gridDim.x));
}

template <class T, bool kFast, int kSig>
__global__ void __launch_bounds__(kPairWarps * 32, 1)
    tc_pair_kernel(const float* __restrict__ x, const __grid_constant__ TcChainParams P, float* __restrict__ y, int n,
                   int tile_images) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  tc_pair_body<T, kFast, kSig>(x, P, y, n, tile_images, reinterpret_cast<T*>(smem_bytes), int(threadIdx.x),
                               int(blockIdx.x), int(gridDim.x));
}

using Kernel = void (*)(const float*, const TcChainParams, float*, int, int);

template <class T, bool kFast>
Kernel pick_pair(int signature) {
  switch (signature) {
    case kSigTanhAvg: return tc_pair_kernel<T, kFast, kSigTanhAvg>;
    case kSigReluMax: return tc_pair_kernel<T, kFast, kSigReluMax>;
    default: return tc_pair_kernel<T, kFast, kSigGeneric>;
  }
}

Kernel pick(const TcKernelChoice& c) {
  if (c.bf16) {
    if (c.version == 1) return c.fast_tanh ? tc_solo_kernel<__nv_bfloat16, true> : tc_solo_kernel<__nv_bfloat16, false>;
    return c.fast_tanh ? pick_pair<__nv_bfloat16, true>(c.signature) : pick_pair<__nv_bfloat16, false>(c.signature);
  }
  if (c.version == 1) return c.fast_tanh ? tc_solo_kernel<__half, true> : tc_solo_kernel<__half, false>;
  return c.fast_tanh ? pick_pair<__half, true>(c.signature) : pick_pair<__half, false>(c.signature);
}

template <bool kFast, int kSig>
__global__ void __launch_bounds__(kQPairs * 64, 1)
    tc_int8_kernel(const float* __restrict__ x, const __grid_constant__ TcInt8Params P, float* __restrict__ y, int n,
                   int tile_images) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  tc_int8_body<kFast, kSig>(x, P, y, n, tile_images, reinterpret_cast<int8_t*>(smem_bytes), int(threadIdx.x),
                            int(blockIdx.x), int(gridDim.x));
}

using QKernel = void (*)(const float*, const TcInt8Params, float*, int, int);

template <bool kFast>
QKernel pick_int8_sig(int signature) {
  switch (signature) {
    case kSigTanhAvg: return tc_int8_kernel<kFast, kSigTanhAvg>;
    case kSigReluMax: return tc_int8_kernel<kFast, kSigReluMax>;
    default: return tc_int8_kernel<kFast, kSigGeneric>;
  }
}

QKernel pick_int8(const TcKernelChoice& c) {
  return c.fast_tanh ? pick_int8_sig<true>(c.signature) : pick_int8_sig<false>(c.signature);
}

}  // namespace

int tc_int8_prepare(const TcKernelChoice& c, const char* context) {
  const QKernel k = pick_int8(c);
  CUDA_CHECK_CTX(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kQSmemBytes), context);
  int blocks = 0;
  CUDA_CHECK_CTX(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kQPairs * 64, kQSmemBytes), context);
  return blocks;
}

void tc_int8_forward(const TcKernelChoice& c, const TcInt8Params& p, const float* x, float* y, int n, int blocks,
                     cudaStream_t stream, const char* context) {
  if (n <= 0) return;
  const int tile = tc_chain_tile_images(c, n, blocks);
  const int64_t needed = ((int64_t(n) + tile - 1) / tile + kQPairs - 1) / kQPairs;
  const int grid = needed < blocks ? int(needed) : blocks;
  pick_int8(c)<<<grid, kQPairs * 64, size_t(kQSmemBytes), stream>>>(x, p, y, n, tile);
  CUDA_CHECK_LAUNCH(context);
}

int tc_chain_threads(const TcKernelChoice& c) { return c.version == 1 ? kSoloWarps * 32 : kPairWarps * 32; }
int tc_chain_smem_bytes(const TcKernelChoice& c) { return c.version == 1 ? kSoloSmemBytes : kPairSmemBytes; }

int tc_chain_prepare(const TcKernelChoice& c, const char* context) {
  const Kernel k = pick(c);
  CUDA_CHECK_CTX(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, tc_chain_smem_bytes(c)), context);
  int blocks = 0;
  CUDA_CHECK_CTX(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, tc_chain_threads(c), tc_chain_smem_bytes(c)),
                 context);
  return blocks;
}

int tc_chain_tile_images(const TcKernelChoice& c, int n, int blocks) {
  if (c.version == 1 || !c.adaptive_tile) return 16;
  const int64_t tiles = int64_t(blocks) * (kPairWarps / 2);  // one per pair of warps
  int64_t images = (int64_t(n) + tiles - 1) / tiles;
  images += images % 2;
  return int(images < 2 ? 2 : images > 16 ? 16 : images);
}

void tc_chain_forward(const TcKernelChoice& c, const TcChainParams& p, const float* x, float* y, int n, int blocks,
                      cudaStream_t stream, const char* context) {
  if (n <= 0) return;
  const int tile = tc_chain_tile_images(c, n, blocks);
  const int tiles_per_block = c.version == 1 ? kSoloWarps : kPairWarps / 2;
  const int64_t needed = ((int64_t(n) + tile - 1) / tile + tiles_per_block - 1) / tiles_per_block;
  const int grid = needed < blocks ? int(needed) : blocks;
  pick(c)<<<grid, tc_chain_threads(c), size_t(tc_chain_smem_bytes(c)), stream>>>(x, p, y, n, tile);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::tc

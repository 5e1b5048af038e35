// The fused dense chain: one persistent kernel runs every dense layer of a model (activations in
// the epilogue, a final softmax) for a tile of TM images per block. The tile's activations stay in
// shared memory ([TM][pitch], two buffers used in turn); weights are read as float4 rows of the
// transposed, zero-padded matrix packed at plan time, through L1/L2.
//
// Version 1: each thread computes 4 images x 4 units (16 accumulators). Per 4 steps of k it reads 4
// float4 of activations (the same addresses for the lanes of a warp: broadcasts) and 4 float4 of
// weights (consecutive lanes, consecutive units: coalesced), and does 64 FMAs. Sums run in k order within each chunk of rows (DenseLayer::chunk_rows).
// Its warps wait on L1TEX: three blocks per SM leave ~23 KB of L1 for f5's 192 KB of weights, and
// the tile's 8 image groups each ask L2 for them.
//
// Version 2 (the default): the same work items and summation order, but each layer's weights come
// through shared memory in slices of rows (cp.async into two buffers in turn: slice j + 1 loads
// while the block computes on slice j), once per block and tile instead of once per image group,
// from shared-memory latency instead of L2's. Same bits as version 1 and the image chain.
#include <cuda_pipeline.h>

#include "engine/custom/fused/device_act.cuh"
#include "engine/custom/fused/fused_layers.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::fused {
namespace {

// part[i][j] += image i's activations times unit j's weights, four k steps (kk ascending).
__device__ __forceinline__ void fma_4x4(const float4 (&a)[4], const float4 (&wk)[4], float (&part)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float av[4] = {a[i].x, a[i].y, a[i].z, a[i].w};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      part[i][0] = fmaf(av[kk], wk[kk].x, part[i][0]);
      part[i][1] = fmaf(av[kk], wk[kk].y, part[i][1]);
      part[i][2] = fmaf(av[kk], wk[kk].z, part[i][2]);
      part[i][3] = fmaf(av[kk], wk[kk].w, part[i][3]);
    }
  }
}

// A finished chunk into the running sums: chunk 0 already holds the bias (acc = part), a later one
// is added (__fadd_rn: never contracted into an FMA).
__device__ __forceinline__ void add_chunk(float (&acc)[4][4], const float (&part)[4][4], bool first) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = first ? part[i][j] : __fadd_rn(acc[i][j], part[i][j]);
}

// Over the tile's real images only (rounded up to 4: rows past them hold zeros or finite junk and
// are never stored to global memory).
__device__ void dense_layer(const DenseLayer& L, float* smem, int images) {
  const int unit_groups = L.units_padded / 4;
  const int total = unit_groups * ((images + 3) / 4);
  const int w_stride = L.units_padded / 4;  // float4s per k row
  const unsigned epi = L.epilogue.code;
  for (int item = threadIdx.x; item < total; item += blockDim.x) {
    const int u4 = item % unit_groups;
    const int t4 = item / unit_groups;
    const float4 b = reinterpret_cast<const float4*>(L.bias)[u4];
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[i][0] = b.x; acc[i][1] = b.y; acc[i][2] = b.z; acc[i][3] = b.w;
    }
    const float* a0 = smem + L.in_off + 4 * t4 * L.in_pitch;
    const float4* w = reinterpret_cast<const float4*>(L.weight_t) + u4;
    // Chunk by chunk (DenseLayer::chunk_rows): chunk 0 continues the bias, each later one is summed
    // from zero in `part` and added in order.
    for (int c0 = 0; c0 < L.in_padded; c0 += L.chunk_rows) {
      const int c1 = min(L.in_padded, c0 + L.chunk_rows);
      float part[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) part[i][j] = c0 == 0 ? acc[i][j] : 0.0f;
      // Four k-steps' loads in flight: at small batches a thread's weight loads from L2 are the latency.
#pragma unroll 4
      for (int k = c0; k < c1; k += 4) {
        float4 a[4], wk[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(a0 + i * L.in_pitch + k);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wk[kk] = __ldg(w + (k + kk) * w_stride);
        fma_4x4(a, wk, part);
      }
      add_chunk(acc, part, c0 == 0);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v[4] = {acc[i][0], acc[i][1], acc[i][2], acc[i][3]};
      apply_epilogue4(v, epi);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = 4 * u4 + j < L.units ? v[j] : 0.0f;
      *reinterpret_cast<float4*>(smem + L.out_off + (4 * t4 + i) * L.out_pitch + 4 * u4) = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

// Rows [r0, r0 + rows) of weight_t (contiguous: rows x units_padded floats) into `dst`, 16 bytes per
// cp.async, every thread of the block taking a share.
__device__ __forceinline__ void request_rows(const DenseLayer& L, int r0, int rows, float* dst) {
  const int quads = rows * L.units_padded / 4;
  const float* src = L.weight_t + size_t(r0) * L.units_padded;
  for (int i = threadIdx.x; i < quads; i += blockDim.x) __pipeline_memcpy_async(dst + 4 * i, src + 4 * i, 16);
}

__device__ void dense_layer_staged(const DenseLayer& L, const DenseChainParams& p, float* smem, int images) {
  const int unit_groups = L.units_padded / 4;
  const int total = unit_groups * ((images + 3) / 4);
  const int KS = L.slice_rows;
  const int slices = (L.in_padded + KS - 1) / KS;
  const unsigned epi = L.epilogue.code;
  // Every thread runs every round and slice (the copies and barriers need the whole block); threads
  // past the last item load and wait but compute nothing.
  for (int base = 0; base < total; base += blockDim.x) {
    const int item = base + int(threadIdx.x);
    const bool valid = item < total;
    const int u4 = valid ? item % unit_groups : 0;
    const int t4 = valid ? item / unit_groups : 0;
    const float4 b = reinterpret_cast<const float4*>(L.bias)[u4];
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[i][0] = b.x; acc[i][1] = b.y; acc[i][2] = b.z; acc[i][3] = b.w;
    }
    const float* a0 = smem + L.in_off + 4 * t4 * L.in_pitch;
    // The chunk being summed (DenseLayer::chunk_rows): chunk 0 continues the bias in `part`, each
    // later one starts from zero there; at a chunk's end `part` goes into acc. Chunks and slices
    // need not line up: `part` carries over a slice's end.
    float part[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) part[i][j] = acc[i][j];
    int chunk_end = min(L.chunk_rows, L.in_padded);  // absolute row
    request_rows(L, 0, min(KS, L.in_padded), smem + p.slice_off[0]);
    __pipeline_commit();
    for (int j = 0; j < slices; ++j) {
      const int r0 = j * KS, rows = min(KS, L.in_padded - r0);
      if (j + 1 < slices) request_rows(L, r0 + KS, min(KS, L.in_padded - r0 - KS), smem + p.slice_off[(j + 1) & 1]);
      __pipeline_commit();
      __pipeline_wait_prior(1);  // this thread's copies of slice j have landed
      __syncthreads();           // and everyone's
      if (valid) {
        const float4* w = reinterpret_cast<const float4*>(smem + p.slice_off[j & 1]) + u4;
        for (int k = 0; k < rows;) {
          const int stop = min(rows, chunk_end - r0);
#pragma unroll 4
          for (; k < stop; k += 4) {
            float4 a[4], wk[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(a0 + i * L.in_pitch + r0 + k);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wk[kk] = w[(k + kk) * unit_groups];
            fma_4x4(a, wk, part);
          }
          if (r0 + k == chunk_end) {
            add_chunk(acc, part, chunk_end <= L.chunk_rows);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
              for (int jj = 0; jj < 4; ++jj) part[i][jj] = 0.0f;
            chunk_end = min(chunk_end + L.chunk_rows, L.in_padded);
          }
        }
      }
      __syncthreads();  // slice j's buffer is refilled by the request for slice j + 2
    }
    if (valid) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v[4] = {acc[i][0], acc[i][1], acc[i][2], acc[i][3]};
        apply_epilogue4(v, epi);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = 4 * u4 + j < L.units ? v[j] : 0.0f;
        *reinterpret_cast<float4*>(smem + L.out_off + (4 * t4 + i) * L.out_pitch + 4 * u4) = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
  }
}

__global__ void __launch_bounds__(kDenseThreads)
    dense_chain_kernel(const __grid_constant__ DenseChainParams p, const float* __restrict__ x, float* __restrict__ y,
                       int n) {
  extern __shared__ __align__(16) float smem[];
  const int TM = p.tile_images;
  const int tiles = (n + TM - 1) / TM;
  const DenseLayer& first_layer = p.layers[0];
  const DenseLayer& last_layer = p.layers[p.layer_count - 1];
  const int F = p.input_features, U = last_layer.units;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int first = tile * TM;
    const int images = min(TM, n - first);
    // Rows past n and columns past F are zeros (their weights are zero too).
    const float* src = x + size_t(first) * F;
    const int rows = (images + 3) / 4 * 4;
    const unsigned in_epi = p.input_epilogue.code;
    for (int i = threadIdx.x; i < rows * first_layer.in_padded; i += blockDim.x) {
      const int t = i / first_layer.in_padded, k = i - t * first_layer.in_padded;
      smem[first_layer.in_off + t * first_layer.in_pitch + k] = (t < images && k < F) ? apply_epilogue(src[size_t(t) * F + k], in_epi) : 0.0f;
    }
    __syncthreads();
    for (int l = 0; l < p.layer_count; ++l) {
      if (p.staged_weights) dense_layer_staged(p.layers[l], p, smem, images);
      else dense_layer(p.layers[l], smem, images);
      __syncthreads();
    }
    const float* out = smem + last_layer.out_off;
    float* dst = y + size_t(first) * U;
    if (p.softmax) {
      // One warp per image: max, then the sum of exp(x - max) (each lane's terms in u order, then
      // the butterfly), then each probability.
      for (int t = warp; t < images; t += warps) softmax_row_warp(out + t * last_layer.out_pitch, U, dst + size_t(t) * U, lane);
    } else {
      for (int i = threadIdx.x; i < images * U; i += blockDim.x) {
        const int t = i / U, u = i - t * U;
        dst[i] = out[t * last_layer.out_pitch + u];
      }
    }
    __syncthreads();  // the next tile overwrites the buffers
  }
}

}  // namespace

void dense_chain_prepare(int smem_bytes, const char* context) {
  CUDA_CHECK_CTX(cudaFuncSetAttribute(dense_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                 context);
}

int dense_chain_blocks_per_sm(int smem_bytes) {
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, dense_chain_kernel, kDenseThreads, smem_bytes));
  return blocks;
}

void dense_chain_forward(const DenseChainParams& p, const float* x, float* y, int n, int blocks, cudaStream_t stream,
                         const char* context) {
  if (n <= 0) return;
  const int tiles = (n + p.tile_images - 1) / p.tile_images;
  const int grid = tiles < blocks ? tiles : blocks;
  dense_chain_kernel<<<grid, kDenseThreads, size_t(p.smem_floats) * sizeof(float), stream>>>(p, x, y, n);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::fused

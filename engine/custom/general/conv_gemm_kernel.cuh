#pragma once
// The implicit-GEMM kernel of conv_gemm.hpp as templates, included by the three .cu files that
// instantiate it, one per way of running the K chunks (conv_gemm.cu: one chunk; conv_gemm_chunks.cu:
// every chunk in one thread; conv_gemm_partial.cu: chunks on separate blocks and the ordered sum), so
// that the three compile in parallel.
#include <climits>
#include <cmath>
#include <string>

#include "engine/custom/device_math.cuh"
#include "engine/custom/general/conv_gemm.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::general::kernel {

// One stage of the epilogue on value v of output channel `c`, sample b, position s of `spatial`.
__device__ __forceinline__ float apply_stages(float v, const GemmEpilogue& e, int from, int to, int64_t b, int c,
                                              int channels, int64_t s, int64_t spatial) {
  for (int i = from; i < to; ++i) {
    const Stage& st = e.stages[i];
    if (st.kind == StageKind::Act) {
      v = apply_activation(v, st.act);
    } else if (st.kind == StageKind::ScaleShift) {  // in double, rounded once (as the elementwise kernel)
      v = float(__dadd_rn(double(v) * double(st.scale[c]), double(st.shift[c])));
    } else {
      v = v + st.residual[(b * channels + c) * spatial + s];
    }
  }
  return v;
}

// Output (sample b, position sp of `spatial`, channel n) of an unpooled GEMM, its epilogue run.
__device__ __forceinline__ void store_plain(const GemmEpilogue& e, float v, int64_t b, int64_t sp, int64_t spatial,
                                            int n, int oc) {
  e.y[b * e.y_stride + e.y_offset + n * spatial + sp] = apply_stages(v, e, 0, e.count, b, n, oc, sp, spatial);
}

// The pooled output of window `window` (rows 4 * window .. + 3 hold its four conv outputs).
__device__ __forceinline__ void store_pooled(const GemmShape& s, const GemmEpilogue& e, const float (&v)[4],
                                             int64_t window, int n) {
  const int wp = s.out_width / 2, hp = s.out_height / 2;
  const int px = int(window % wp);
  const int64_t t = window / wp;
  const int py = int(t % hp);
  const int64_t b = t / hp;
  const int64_t conv_spatial = int64_t(s.out_height) * s.out_width, pooled = int64_t(hp) * wp;
  const int oc = s.out_channels;
  float best = -INFINITY;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t sp = int64_t(2 * py + (r >> 1)) * s.out_width + 2 * px + (r & 1);
    best = fmaxf(best, apply_stages(v[r], e, 0, e.pool_at, b, n, oc, sp, conv_spatial));
  }
  const int64_t sp = int64_t(py) * wp + px;
  e.y[b * e.y_stride + e.y_offset + n * pooled + sp] = apply_stages(best, e, e.pool_at, e.count, b, n, oc, sp, pooled);
}

// How a launch treats the K chunks (GemmChunks): one chunk started at the bias; every chunk in the
// same thread (a second accumulator per output takes each chunk's sum); or chunk blockIdx.z only,
// its sum (from 0) stored to partial[(z * oc + n) * M + m] for chunk_sum_kernel.
enum class Mode { Whole, Chunks, Partial };

template <int BM, int BN, int TM, int TN, bool DENSE, bool POOL, Mode MODE>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    conv_gemm_kernel(const float* __restrict__ x, const float* __restrict__ w, const int4* __restrict__ ktab,
                     int ocp, GemmShape s, GemmChunks chunks, GemmEpilogue e, float* __restrict__ partial, int64_t M) {
  constexpr int BK = kGemmBk;
  constexpr int RY = BM / TM, RX = BN / TN;  // threads along m and along n
  constexpr int THREADS = RY * RX;
  constexpr int A_PER = BM * BK / THREADS, B_PER = BN * BK / THREADS;
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read as float4");
  static_assert(THREADS % BM == 0 || DENSE, "the conv loader gives each thread one row");
  static_assert(THREADS % BN == 0 && (BM * BK) % THREADS == 0 && (BN * BK) % THREADS == 0, "loader shapes");
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tid = threadIdx.x;
  const int ty = tid % RY, tx = tid / RY;  // m fastest: a warp's stores cover consecutive pixels
  const int64_t m0 = int64_t(blockIdx.x) * BM;
  const int n0 = blockIdx.y * BN;
  const int K = s.channels * s.kernel_h * s.kernel_w;
  const int ktiles = (K + BK - 1) / BK;
  int kt_begin = 0, kt_end = ktiles;
  if constexpr (MODE == Mode::Partial) {
    kt_begin = int(blockIdx.z) * chunks.tiles;
    kt_end = min(ktiles, kt_begin + chunks.tiles);
  }
  const int hw = s.height * s.width;

  // The conv loader's row: one output pixel per thread, decoded once.
  const float* xb = x;
  int iy0 = 0, ix0 = 0;
  bool row_valid = false;
  if constexpr (!DENSE) {
    const int64_t m = m0 + tid % BM;
    row_valid = m < M;
    int oy, ox;
    int64_t b;
    if constexpr (POOL) {
      const int wp = s.out_width / 2, hp = s.out_height / 2;
      const int quad = int(m & 3);
      const int64_t window = m >> 2;
      const int px = int(window % wp);
      const int64_t t = window / wp;
      const int py = int(t % hp);
      b = t / hp;
      oy = 2 * py + (quad >> 1);
      ox = 2 * px + (quad & 1);
    } else {
      ox = int(m % s.out_width);
      const int64_t t = m / s.out_width;
      oy = int(t % s.out_height);
      b = t / s.out_height;
    }
    if (!row_valid) b = 0;
    xb = x + b * int64_t(s.channels) * hw;
    iy0 = oy * s.stride_h - s.pad_top;
    ix0 = ox * s.stride_w - s.pad_left;
  }

  float ra[A_PER], rb[B_PER];
  auto load = [&](int kt) {
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
      float v = 0.0f;
      if constexpr (DENSE) {
        const int kk = kt * BK + tid % BK;
        const int64_t m = m0 + tid / BK + i * (THREADS / BK);
        if (m < M && kk < K) v = x[m * K + kk];
      } else {
        const int kk = kt * BK + tid / BM + i * (THREADS / BM);
        if (row_valid && kk < K) {
          const int4 t = __ldg(&ktab[kk]);
          const int iy = iy0 + t.y, ix = ix0 + t.z;
          if (unsigned(iy) < unsigned(s.height) && unsigned(ix) < unsigned(s.width)) v = xb[t.x + iy * s.width + ix];
        }
      }
      ra[i] = v;
    }
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
      const int kk = kt * BK + tid / BN + i * (THREADS / BN);  // rows past K are packed as zeros
      rb[i] = __ldg(&w[int64_t(kk) * ocp + n0 + tid % BN]);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
      if constexpr (DENSE)
        As[buf][tid % BK][tid / BK + i * (THREADS / BK)] = ra[i];
      else
        As[buf][tid / BM + i * (THREADS / BM)][tid % BM] = ra[i];
    }
#pragma unroll
    for (int i = 0; i < B_PER; ++i) Bs[buf][tid / BN + i * (THREADS / BN)][tid % BN] = rb[i];
  };

  // acc: the running sum (of everything with one chunk, of the current chunk otherwise). Mode::Chunks:
  // the bias plus the finished chunks' sums, in order, in this thread's slots of dynamic shared
  // memory ([TM * TN][THREADS]: consecutive threads, consecutive banks), touched once per chunk, so
  // that the registers hold one accumulator per output as in the other modes.
  extern __shared__ float totals[];
  float acc[TM][TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
    const float b0 = (MODE != Mode::Partial && e.bias != nullptr && n < s.out_channels) ? e.bias[n] : 0.0f;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      acc[i][j] = MODE == Mode::Whole ? b0 : 0.0f;
      if constexpr (MODE == Mode::Chunks) totals[(i * TN + j) * THREADS + tid] = b0;
    }
  }

  load(kt_begin);
  store(0);
  __syncthreads();
  int in_chunk = 0;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int buf = (kt - kt_begin) & 1;
    if (kt + 1 < kt_end) load(kt + 1);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], bv[TN];
#pragma unroll
      for (int g = 0; g < TM / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(&As[buf][kk][g * RY * 4 + ty * 4]);
        a[g * 4] = v.x, a[g * 4 + 1] = v.y, a[g * 4 + 2] = v.z, a[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int g = 0; g < TN / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][kk][g * RX * 4 + tx * 4]);
        bv[g * 4] = v.x, bv[g * 4 + 1] = v.y, bv[g * 4 + 2] = v.z, bv[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
    if constexpr (MODE == Mode::Chunks) {
      if (++in_chunk == chunks.tiles || kt + 1 == kt_end) {  // a chunk ends: fold its sum in
        in_chunk = 0;
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) {
            float& t = totals[(i * TN + j) * THREADS + tid];
            t = t + acc[i][j];
            acc[i][j] = 0.0f;
          }
      }
    }
    if (kt + 1 < kt_end) store(buf ^ 1);  // that buffer was last read before the previous barrier
    __syncthreads();
  }
  if constexpr (MODE == Mode::Chunks) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = totals[(i * TN + j) * THREADS + tid];
  }

  const int oc = s.out_channels;
#pragma unroll
  for (int g = 0; g < TM / 4; ++g) {
    const int64_t mg = m0 + g * RY * 4 + ty * 4;  // first of this thread's 4 consecutive rows
    if constexpr (MODE == Mode::Partial) {
      float* pz = partial + int64_t(blockIdx.z) * oc * M;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (mg + r >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
          if (n < oc) pz[int64_t(n) * M + mg + r] = acc[g * 4 + r][j];
        }
      }
    } else if constexpr (POOL) {
      if (mg >= M) continue;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
        if (n >= oc) continue;
        const float v[4] = {acc[g * 4][j], acc[g * 4 + 1][j], acc[g * 4 + 2][j], acc[g * 4 + 3][j]};
        store_pooled(s, e, v, mg >> 2, n);
      }
    } else {
      const int64_t spatial = int64_t(s.out_height) * s.out_width;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t m = mg + r;
        if (m >= M) continue;
        const int64_t b = m / spatial, sp = m - b * spatial;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
          if (n < oc) store_plain(e, acc[g * 4 + r][j], b, sp, spatial, n, oc);
        }
      }
    }
  }
}

template <int BM, int BN, int TM, int TN, Mode MODE>
void launch(const GemmArgs& a, float* partial, int64_t M, cudaStream_t stream, const std::string& context) {
  const int64_t row_blocks = (M + BM - 1) / BM, col_blocks = (a.shape.out_channels + BN - 1) / BN;
  if (row_blocks > INT_MAX || col_blocks > 65535)
    throw gpu::CudaError(context + ": " + std::to_string(M) + " x " + std::to_string(a.shape.out_channels) +
                         " outputs exceed the GEMM kernel's grid");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(col_blocks),
                  MODE == Mode::Partial ? static_cast<unsigned>(a.chunks.count) : 1u);
  constexpr int threads = (BM / TM) * (BN / TN);
  constexpr size_t smem = MODE == Mode::Chunks ? size_t(TM) * TN * threads * sizeof(float) : 0;
  const auto& c = a.chunks;
  auto run = [&](auto kernel) {
    if constexpr (smem > 48 * 1024)  // past the default limit: opt in (a host-side attribute, cheap)
      CUDA_CHECK_CTX(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                     context + ": shared memory for the K chunks' sums");
    kernel<<<grid, threads, smem, stream>>>(a.x, a.weight, a.k_table, a.oc_padded, a.shape, c, a.epilogue, partial, M);
  };
  if (a.shape.dense)
    run(conv_gemm_kernel<BM, BN, TM, TN, true, false, MODE>);
  else if (a.epilogue.pool_at >= 0)
    run(conv_gemm_kernel<BM, BN, TM, TN, false, true, MODE>);
  else
    run(conv_gemm_kernel<BM, BN, TM, TN, false, false, MODE>);
}

// The GEMM of `a` on `tile` in mode MODE (Partial: chunk sums into `partial`).
template <Mode MODE>
void launch_tile(const GemmArgs& a, GemmTile tile, float* partial, int64_t M, cudaStream_t stream,
                 const std::string& context) {
  switch (tile) {
    case GemmTile::T32x32: launch<32, 32, 4, 4, MODE>(a, partial, M, stream, context); break;
    case GemmTile::T64x16: launch<64, 16, 4, 4, MODE>(a, partial, M, stream, context); break;
    case GemmTile::T64x32: launch<64, 32, 4, 4, MODE>(a, partial, M, stream, context); break;
    case GemmTile::T64x64: launch<64, 64, 4, 4, MODE>(a, partial, M, stream, context); break;
    case GemmTile::T128x32: launch<128, 32, 4, 4, MODE>(a, partial, M, stream, context); break;
    case GemmTile::T128x64: launch<128, 64, 8, 4, MODE>(a, partial, M, stream, context); break;
    case GemmTile::T128x128: launch<128, 128, 8, 8, MODE>(a, partial, M, stream, context); break;
    case GemmTile::Count: break;
  }
  CUDA_CHECK_LAUNCH(context);
}

// One per .cu file.
void launch_whole(const GemmArgs& a, GemmTile tile, int64_t M, cudaStream_t stream, const std::string& context);
void launch_chunks(const GemmArgs& a, GemmTile tile, int64_t M, cudaStream_t stream, const std::string& context);
void launch_partial(const GemmArgs& a, GemmTile tile, float* partial, int64_t M, cudaStream_t stream,
                    const std::string& context);

}  // namespace engine::custom::general::kernel

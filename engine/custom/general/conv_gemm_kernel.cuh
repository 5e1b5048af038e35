#pragma once
// The implicit-GEMM kernel of conv_gemm.hpp as templates, included by the three .cu files that
// instantiate it, one per way of running the K chunks (conv_gemm.cu: one chunk; conv_gemm_chunks.cu:
// every chunk in one thread; conv_gemm_partial.cu: chunks on separate blocks, the last block of a
// tile adding them in order), so that the three compile in parallel.
#include <algorithm>
#include <climits>
#include <cstdint>
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
// its sum (from 0) stored to partial[(z * oc + n) * M + m], added in order by the tile's last block
// (ordered_tile_sum) or by chunk_sum_kernel.
enum class Mode { Whole, Chunks, Partial };

// The tile's last block adds the chunks (one kernel per layer) while that takes at most this many
// loads per thread; beyond (large tiles over a few images), chunk_sum_kernel spreads the sum over the
// whole device instead. The same additions in the same order either way.
inline constexpr int kLastBlockLoads = 64;

// t plus the `count` values p[0], p[stride], ... added in order; the loads go out 8 at a time (they
// are independent, only the additions are ordered) and bypass L1 (other blocks wrote them).
__device__ __forceinline__ float ordered_sum(float t, const float* p, int count, int64_t stride) {
  int z = 0;
  for (; z + 8 <= count; z += 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = __ldcg(p + (z + u) * stride);
#pragma unroll
    for (int u = 0; u < 8; ++u) t = t + v[u];
  }
  for (; z < count; ++z) t = t + __ldcg(p + z * stride);
  return t;
}

// The outputs of the BM x BN tile at (m0, n0): the bias plus the chunk sums in `partial` in chunk
// order, then the epilogue, the block's threads taking the tile's valid outputs (pooled: windows)
// in turn, rows fastest.
template <int BM, int BN, int THREADS, bool POOL>
__device__ void ordered_tile_sum(const float* partial, int count, const GemmShape& s, const GemmEpilogue& e,
                                 int64_t M, int64_t m0, int n0) {
  const int oc = s.out_channels;
  const int rows = int(min(int64_t(BM), M - m0)), cols = min(BN, oc - n0);
  const int64_t stride = int64_t(oc) * M;
  if constexpr (POOL) {
    const int windows = rows / 4;  // M and m0 are multiples of 4
    for (int o = threadIdx.x; o < windows * cols; o += THREADS) {
      const int n = n0 + o / windows;
      const int64_t m = m0 + 4 * (o % windows);
      const float b0 = e.bias != nullptr ? e.bias[n] : 0.0f;
      float v[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] = ordered_sum(b0, partial + int64_t(n) * M + m + r, count, stride);
      store_pooled(s, e, v, m >> 2, n);
    }
  } else {
    const int64_t spatial = int64_t(s.out_height) * s.out_width;
    for (int o = threadIdx.x; o < rows * cols; o += THREADS) {
      const int n = n0 + o / rows;
      const int64_t m = m0 + o % rows;
      const float b0 = e.bias != nullptr ? e.bias[n] : 0.0f;
      const float t = ordered_sum(b0, partial + int64_t(n) * M + m, count, stride);
      const int64_t b = m / spatial;
      store_plain(e, t, b, m - b * spatial, spatial, n, oc);
    }
  }
}

// Steps of kGemmBk values of k in flight: a step's A and B are copied into shared memory by
// cp.async kGemmStages - 1 steps before the threads multiply them, so that the global latency of a
// step (for a conv, a k-table read, then the gathered input) hides behind the arithmetic of the
// steps before it.
inline constexpr int kGemmStages = 4;
// A's rows in shared memory ([k][BM + kApad]) are padded so that the dense loader's stores (8 values
// of k per row of A) fall in distinct banks; a multiple of 4 keeps the float4 reads aligned.
inline constexpr int kApad = 4;

// How a step's A reaches shared memory: gathered 4 bytes at a time through the k table into [k][m]
// (conv), the same from dense rows (dense rows not 16-byte aligned), or 16 bytes at a time from
// 16-byte aligned dense rows into [m][k] (rows of kGemmBk + kApad floats: consecutive rows' float4
// reads fall in distinct banks).
enum class Loader { Gather, DenseRows4, DenseRows16 };

// Floats of one pipeline stage (A, then B [BK][BN]) and the bytes of dynamic shared memory of a
// launch: the stages, then (Mode::Chunks) the bias plus the finished chunks' sums per output,
// [TM * TN][threads] (consecutive threads, consecutive banks).
template <int BM, int BN, Loader LOAD>
constexpr int stage_floats() {
  return (LOAD == Loader::DenseRows16 ? BM * (kGemmBk + kApad) : kGemmBk * (BM + kApad)) + kGemmBk * BN;
}
template <int BM, int BN, int TM, int TN, Loader LOAD, Mode MODE>
constexpr size_t gemm_smem_bytes() {
  constexpr size_t threads = size_t(BM / TM) * (BN / TN);
  return (size_t(kGemmStages) * stage_floats<BM, BN, LOAD>() +
          (MODE == Mode::Chunks ? size_t(TM) * TN * threads : 0)) *
         sizeof(float);
}

// 4 bytes global -> shared, asynchronous; `valid` false: nothing is read, the destination is zeroed.
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
// 16 aligned bytes global -> shared, asynchronous, bypassing L1 (the weights: read once per block).
__device__ __forceinline__ void cp_async_16(float* dst, const float* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
// The same with `valid` false reading nothing and zeroing the 16 destination bytes.
__device__ __forceinline__ void cp_async_16z(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// Threads per SM the register budget must allow: 512 (128 registers a thread) for 8x8 thread tiles
// (two blocks of 256) and blocks of 64 threads (small batches: few blocks, registers to spare), 768
// (80 registers) for the others, so that one block's barrier waits and gathers hide behind another
// block's arithmetic.
template <int TM, int TN, int THREADS>
constexpr int resident_threads() {
  return TM * TN >= 64 || THREADS < 128 ? 512 : 768;
}

template <int BM, int BN, int TM, int TN, Loader LOAD, bool POOL, Mode MODE>
__global__ void __launch_bounds__((BM / TM) * (BN / TN),
                                  resident_threads<TM, TN, (BM / TM) * (BN / TN)>() / ((BM / TM) * (BN / TN)))
    conv_gemm_kernel(const float* __restrict__ x, const float* __restrict__ w, const int4* __restrict__ ktab,
                     int ocp, GemmShape s, GemmChunks chunks, GemmEpilogue e, float* __restrict__ partial,
                     unsigned* __restrict__ arrivals, int64_t M) {
  constexpr int BK = kGemmBk;
  constexpr bool DENSE = LOAD != Loader::Gather, ROWS16 = LOAD == Loader::DenseRows16;
  constexpr int RY = BM / TM, RX = BN / TN;  // threads along m and along n
  constexpr int THREADS = RY * RX;
  constexpr int A_LD = ROWS16 ? BK + kApad : BM + kApad;  // [m][A_LD] or [k][A_LD]
  constexpr int A_FLOATS = ROWS16 ? BM * A_LD : BK * A_LD;
  constexpr int A_PER = BM * BK / THREADS;  // values of A each thread copies per step
  constexpr int A16 = BM * BK / 4;                        // 16-byte copies of A per step (row copies)
  constexpr int A16_PER = (A16 + THREADS - 1) / THREADS;  // per thread
  constexpr int B_VEC = BN * BK / 4;        // float4s of B per step
  constexpr int STAGE = stage_floats<BM, BN, LOAD>();
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read as float4");
  static_assert(THREADS % BM == 0 || DENSE, "the conv loader gives each thread one row");
  static_assert(THREADS % BK == 0 && (BM * BK) % THREADS == 0 && BN % 4 == 0, "loader shapes");
  static_assert(STAGE % 4 == 0 && A_FLOATS % 4 == 0, "stages and B start 16-byte aligned");
  static_assert(!ROWS16 || ((A16 % THREADS == 0 || A16_PER == 1) && THREADS % (BK / 4) == 0), "row copies");
  extern __shared__ __align__(16) float smem[];

  // A warp is 8 threads along m (consecutive pixels: its stores cover 32 rows) by 4 along n, so that
  // its float4 reads of a k row of A cover 128 contiguous bytes and those of B 64 (one shared-memory
  // wavefront each). Which thread owns an output changes no operation on it.
  constexpr int WY = 8, WX = 32 / WY;
  static_assert(RY % WY == 0 && RX % WX == 0, "whole warps");
  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int ty = (warp % (RY / WY)) * WY + lane % WY;
  const int tx = (warp / (RY / WY)) * WX + lane / WY;
  const int64_t m0 = int64_t(blockIdx.x) * BM;
  const int n0 = blockIdx.y * BN;
  // Row (of the block) of this thread's i-th output row: 4 consecutive rows per group of 4 (a
  // pooling window's four outputs in one thread), or with the dense row copies rows RY apart (the
  // float4 reads of A along k by consecutive threads then hit distinct banks).
  auto row_of = [&](int i) { return ROWS16 ? i * RY + ty : (i / 4) * RY * 4 + ty * 4 + i % 4; };
  const int K = s.channels * s.kernel_h * s.kernel_w;
  const int ktiles = (K + BK - 1) / BK;
  int kt_begin = 0, kt_end = ktiles;
  if constexpr (MODE == Mode::Partial) {
    kt_begin = int(blockIdx.z) * chunks.tiles;
    kt_end = min(ktiles, kt_begin + chunks.tiles);
  }
  // The conv loader's row: one output pixel per thread, decoded once. A row past M gets a window
  // row no input has (kKTableNoRow), so that its copies fail the bounds test as those past K do.
  const float* xb = x;
  int iy0 = kKTableNoRow, ix0 = 0, base = 0;
  if constexpr (!DENSE) {
    const int64_t m = m0 + tid % BM;
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
    if (m < M) {
      xb = x + b * int64_t(s.channels) * s.height * s.width;
      iy0 = oy * s.stride_h - s.pad_top;
      ix0 = ox * s.stride_w - s.pad_left;
      base = iy0 * s.width + ix0;  // + the entry's (c * H + p) * W + q: the input's offset in the sample
    }
  }

  // The conv loader's k-table entries of a step (the table is padded to whole steps). They are all
  // read before any copy is issued (a copy is a compiler barrier: reads after it would wait in turn).
  // With 4x4 thread tiles (the tiles of small batches, few warps per SM) they are read one step
  // ahead, so that a step's gather waits for no k-table read; larger thread tiles (large batches)
  // read them as they issue, the latency hidden by the other blocks on the SM, the registers left to
  // the accumulators.
  constexpr bool TAB_AHEAD = !DENSE && TM * TN <= 16;
  constexpr int TAB_N = DENSE ? 1 : A_PER;
  int4 tab[TAB_N];
  auto read_tab = [&](int kt) {
#pragma unroll
    for (int i = 0; i < TAB_N; ++i) tab[i] = __ldg(&ktab[kt * BK + tid / BM + i * (THREADS / BM)]);
  };
  if constexpr (TAB_AHEAD) read_tab(kt_begin);

  // The dense loader's rows: thread tid copies k tid % BK of rows tid / BK + i * THREADS / BK; with
  // 16-byte copies, k (tid % 2) * 4 .. + 3 of rows tid / 2 + i * THREADS / 2.
  const float* xa = x;
  unsigned rows_ok = 0;  // bit i: row i of this thread is below M
  if constexpr (ROWS16) {
    const int64_t r0 = m0 + tid / (BK / 4);
    xa = x + r0 * K + (tid % (BK / 4)) * 4;
#pragma unroll
    for (int i = 0; i < A16_PER; ++i) rows_ok |= unsigned(r0 + i * (THREADS / (BK / 4)) < M) << i;
  } else if constexpr (DENSE) {
    const int64_t r0 = m0 + tid / BK;
    xa = x + r0 * K + tid % BK;
#pragma unroll
    for (int i = 0; i < A_PER; ++i) rows_ok |= unsigned(r0 + i * (THREADS / BK) < M) << i;
  }

  // Step kt's A and B into pipeline stage `stage` (values outside the input or past K as zeros; B's
  // rows past K are packed as zeros).
  constexpr int B_PER = (B_VEC + THREADS - 1) / THREADS;  // float4s of B each thread copies per step
  auto issue = [&](int kt, int stage) {
    float* As = smem + stage * STAGE;
    float* Bs = As + A_FLOATS;
    if constexpr (ROWS16) {  // K is a multiple of 4: a copy is wholly inside K or wholly past it
      constexpr int PARTS = BK / 4;
      const bool k_ok = kt * BK + (tid % PARTS) * 4 < K;
#pragma unroll
      for (int i = 0; i < A16_PER; ++i) {
        if (A16 % THREADS != 0 && tid >= A16) break;  // more threads than copies (A16_PER is 1)
        const int r = tid / PARTS + i * (THREADS / PARTS);
        const bool ok = k_ok && (rows_ok >> i & 1u);
        cp_async_16z(&As[r * A_LD + (tid % PARTS) * 4], ok ? xa + int64_t(i * (THREADS / PARTS)) * K + kt * BK : x,
                     ok);
      }
    } else if constexpr (DENSE) {
      const bool k_ok = kt * BK + tid % BK < K;
#pragma unroll
      for (int i = 0; i < A_PER; ++i) {
        const int r = tid / BK + i * (THREADS / BK);
        const bool ok = k_ok && (rows_ok >> i & 1u);
        cp_async_4(&As[(tid % BK) * A_LD + r], ok ? xa + int64_t(i * (THREADS / BK)) * K + kt * BK : x, ok);
      }
    } else {
      if constexpr (!TAB_AHEAD) read_tab(kt);
#pragma unroll
      for (int i = 0; i < A_PER; ++i) {
        const int kk = tid / BM + i * (THREADS / BM), r = tid % BM;
        const int4 t = tab[i];
        const bool ok = unsigned(iy0 + t.y) < unsigned(s.height) && unsigned(ix0 + t.z) < unsigned(s.width);
        cp_async_4(&As[kk * A_LD + r], ok ? xb + (base + t.w) : x, ok);
      }
      if constexpr (TAB_AHEAD)
        if (kt + 1 < kt_end) read_tab(kt + 1);
    }
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
      const int u = tid + i * THREADS;
      if (B_VEC % THREADS == 0 || u < B_VEC) {
        const int kk = u / (BN / 4), col = (u % (BN / 4)) * 4;
        cp_async_16(&Bs[kk * BN + col], w + int64_t(kt * BK + kk) * ocp + n0 + col);
      }
    }
  };

  // acc: the running sum (of everything with one chunk, of the current chunk otherwise). Mode::Chunks:
  // the bias plus the finished chunks' sums, in order, in this thread's slots of shared memory after
  // the stages, touched once per chunk, so that the registers hold one accumulator per output as in
  // the other modes; as float4s of 4 consecutive columns (one 16-byte access per 4 outputs).
  float4* totals = reinterpret_cast<float4*>(smem + kGemmStages * STAGE);
  auto total = [&](int i, int j4) -> float4& { return totals[(i * (TN / 4) + j4) * THREADS + tid]; };
  float acc[TM][TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
    const float b0 = (MODE != Mode::Partial && e.bias != nullptr && n < s.out_channels) ? e.bias[n] : 0.0f;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      acc[i][j] = MODE == Mode::Whole ? b0 : 0.0f;
      if constexpr (MODE == Mode::Chunks) reinterpret_cast<float*>(&total(i, j / 4))[j % 4] = b0;
    }
  }

  // Steps kt_begin .. + kGemmStages - 2 in flight (one commit group per step, empty past the end).
#pragma unroll
  for (int p = 0; p < kGemmStages - 1; ++p) {
    if (kt_begin + p < kt_end) issue(kt_begin + p, p);
    cp_async_commit();
  }
  int in_chunk = 0, stage = 0;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    cp_async_wait<kGemmStages - 2>();  // this thread's copies of step kt have landed
    __syncthreads();                    // everyone's; and everyone is done with step kt - 1's stage
    {
      const int ahead = kt + kGemmStages - 1;
      const int into = stage == 0 ? kGemmStages - 1 : stage - 1;  // step kt - 1's stage
      if (ahead < kt_end) issue(ahead, into);
      cp_async_commit();
    }
    const float* As = smem + stage * STAGE;
    const float* Bs = As + A_FLOATS;
    if constexpr (ROWS16) {
      // Per 4 values of k: each row's 4 as one float4 (as many shared-memory reads as the [k][m]
      // layout's), then k in order as below.
#pragma unroll
      for (int kq = 0; kq < BK; kq += 4) {
        float4 a4[TM];
#pragma unroll
        for (int i = 0; i < TM; ++i) a4[i] = *reinterpret_cast<const float4*>(&As[row_of(i) * A_LD + kq]);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          float bv[TN];
#pragma unroll
          for (int g = 0; g < TN / 4; ++g) {
            const float4 v = *reinterpret_cast<const float4*>(&Bs[(kq + u) * BN + g * RX * 4 + tx * 4]);
            bv[g * 4] = v.x, bv[g * 4 + 1] = v.y, bv[g * 4 + 2] = v.z, bv[g * 4 + 3] = v.w;
          }
#pragma unroll
          for (int i = 0; i < TM; ++i) {
            const float av = u == 0 ? a4[i].x : u == 1 ? a4[i].y : u == 2 ? a4[i].z : a4[i].w;
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av, bv[j], acc[i][j]);
          }
        }
      }
    } else {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], bv[TN];
#pragma unroll
      for (int g = 0; g < TM / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(&As[kk * A_LD + g * RY * 4 + ty * 4]);
        a[g * 4] = v.x, a[g * 4 + 1] = v.y, a[g * 4 + 2] = v.z, a[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int g = 0; g < TN / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[kk * BN + g * RX * 4 + tx * 4]);
        bv[g * 4] = v.x, bv[g * 4 + 1] = v.y, bv[g * 4 + 2] = v.z, bv[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
    }
    if constexpr (MODE == Mode::Chunks) {
      if (++in_chunk == chunks.tiles || kt + 1 == kt_end) {  // a chunk ends: fold its sum in
        in_chunk = 0;
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j4 = 0; j4 < TN / 4; ++j4) {
            float4 t = total(i, j4);
            t.x = t.x + acc[i][j4 * 4];
            t.y = t.y + acc[i][j4 * 4 + 1];
            t.z = t.z + acc[i][j4 * 4 + 2];
            t.w = t.w + acc[i][j4 * 4 + 3];
            total(i, j4) = t;
#pragma unroll
            for (int u = 0; u < 4; ++u) acc[i][j4 * 4 + u] = 0.0f;
          }
      }
    }
    stage = stage + 1 == kGemmStages ? 0 : stage + 1;
  }
  cp_async_wait<0>();  // no copy outlives the block (the groups past the end are empty)
  if constexpr (MODE == Mode::Chunks) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j4 = 0; j4 < TN / 4; ++j4) {
        const float4 t = total(i, j4);
        acc[i][j4 * 4] = t.x, acc[i][j4 * 4 + 1] = t.y, acc[i][j4 * 4 + 2] = t.z, acc[i][j4 * 4 + 3] = t.w;
      }
  }

  const int oc = s.out_channels;
  if constexpr (MODE == Mode::Partial) {
    float* pz = partial + int64_t(blockIdx.z) * oc * M;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t m = m0 + row_of(i);
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
        if (n < oc) pz[int64_t(n) * M + m] = acc[i][j];
      }
    }
    if (arrivals == nullptr) return;  // chunk_sum_kernel adds the chunks
    // The last of the tile's gridDim.z blocks to arrive sees every chunk's sum (each block's stores
    // are made visible device-wide before it counts itself) and adds them in order.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      unsigned& arrived = arrivals[blockIdx.y * gridDim.x + blockIdx.x];
      last = atomicAdd(&arrived, 1u) + 1 == gridDim.z;
      if (last) arrived = 0;  // every block of the tile has counted: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    ordered_tile_sum<BM, BN, THREADS, POOL>(partial, int(gridDim.z), s, e, M, m0, n0);
    return;
  } else if constexpr (POOL) {
#pragma unroll
    for (int g = 0; g < TM / 4; ++g) {
      const int64_t mg = m0 + row_of(g * 4);  // first of this thread's 4 consecutive rows: one window
      if (mg >= M) continue;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
        if (n >= oc) continue;
        const float v[4] = {acc[g * 4][j], acc[g * 4 + 1][j], acc[g * 4 + 2][j], acc[g * 4 + 3][j]};
        store_pooled(s, e, v, mg >> 2, n);
      }
    }
  } else {
    const int64_t spatial = int64_t(s.out_height) * s.out_width;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t m = m0 + row_of(i);
      if (m >= M) continue;
      const int64_t b = m / spatial, sp = m - b * spatial;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + (j / 4) * RX * 4 + tx * 4 + j % 4;
        if (n < oc) store_plain(e, acc[i][j], b, sp, spatial, n, oc);
      }
    }
  }
}

// Returns whether the tiles' last blocks added the chunks (Mode::Partial).
template <int BM, int BN, int TM, int TN, Mode MODE>
bool launch(const GemmArgs& a, ChunkScratch scratch, int64_t M, cudaStream_t stream, const std::string& context) {
  const int64_t row_blocks = (M + BM - 1) / BM, col_blocks = (a.shape.out_channels + BN - 1) / BN;
  if (row_blocks > INT_MAX || col_blocks > 65535)
    throw gpu::CudaError(context + ": " + std::to_string(M) + " x " + std::to_string(a.shape.out_channels) +
                         " outputs exceed the GEMM kernel's grid");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(col_blocks),
                  MODE == Mode::Partial ? static_cast<unsigned>(a.chunks.count) : 1u);
  constexpr int threads = (BM / TM) * (BN / TN);
  const auto& c = a.chunks;
  if constexpr (MODE == Mode::Partial) {
    const int64_t sums = std::min<int64_t>(BM, M) * std::min(BN, a.shape.out_channels) * c.count;
    if (sums > int64_t(kLastBlockLoads) * threads) scratch.arrivals = nullptr;
  }
  auto run = [&](auto kernel, size_t smem) {
    // Past the default limit: opt in (a host-side attribute, cheap). No carveout preference: the
    // driver sizes shared memory for the blocks that fit and leaves the rest to L1, which the conv
    // gather reads through.
    if (smem > 48 * 1024)
      CUDA_CHECK_CTX(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                     context + ": shared memory for the K chunks' sums");
    kernel<<<grid, threads, smem, stream>>>(a.x, a.weight, a.k_table, a.oc_padded, a.shape, c, a.epilogue,
                                            scratch.partial, scratch.arrivals, M);
  };
  // 16-byte row copies need every row of the input 16-byte aligned: K a multiple of 4, x aligned.
  const bool rows16 = a.dense_row_copies && a.shape.k() % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  if (a.shape.dense && rows16)
    run(conv_gemm_kernel<BM, BN, TM, TN, Loader::DenseRows16, false, MODE>,
        gemm_smem_bytes<BM, BN, TM, TN, Loader::DenseRows16, MODE>());
  else if (a.shape.dense)
    run(conv_gemm_kernel<BM, BN, TM, TN, Loader::DenseRows4, false, MODE>,
        gemm_smem_bytes<BM, BN, TM, TN, Loader::DenseRows4, MODE>());
  else if (a.epilogue.pool_at >= 0)
    run(conv_gemm_kernel<BM, BN, TM, TN, Loader::Gather, true, MODE>,
        gemm_smem_bytes<BM, BN, TM, TN, Loader::Gather, MODE>());
  else
    run(conv_gemm_kernel<BM, BN, TM, TN, Loader::Gather, false, MODE>,
        gemm_smem_bytes<BM, BN, TM, TN, Loader::Gather, MODE>());
  return MODE == Mode::Partial && scratch.arrivals != nullptr;
}

// The GEMM of `a` on `tile` in mode MODE (Partial: chunk sums into `scratch`); whether the tiles'
// last blocks added the chunks.
template <Mode MODE>
bool launch_tile(const GemmArgs& a, GemmTile tile, ChunkScratch scratch, int64_t M, cudaStream_t stream,
                 const std::string& context) {
  bool summed = false;
  switch (tile) {
    case GemmTile::T32x32: summed = launch<32, 32, 4, 4, MODE>(a, scratch, M, stream, context); break;
    case GemmTile::T64x16: summed = launch<64, 16, 4, 4, MODE>(a, scratch, M, stream, context); break;
    case GemmTile::T64x32: summed = launch<64, 32, 4, 4, MODE>(a, scratch, M, stream, context); break;
    case GemmTile::T64x64: summed = launch<64, 64, 4, 4, MODE>(a, scratch, M, stream, context); break;
    case GemmTile::T128x32: summed = launch<128, 32, 4, 4, MODE>(a, scratch, M, stream, context); break;
    case GemmTile::T128x64: summed = launch<128, 64, 8, 4, MODE>(a, scratch, M, stream, context); break;
    case GemmTile::T128x128: summed = launch<128, 128, 8, 8, MODE>(a, scratch, M, stream, context); break;
    case GemmTile::Count: break;
  }
  CUDA_CHECK_LAUNCH(context);
  return summed;
}

// One per .cu file.
void launch_whole(const GemmArgs& a, GemmTile tile, int64_t M, cudaStream_t stream, const std::string& context);
void launch_chunks(const GemmArgs& a, GemmTile tile, int64_t M, cudaStream_t stream, const std::string& context);
void launch_partial(const GemmArgs& a, GemmTile tile, ChunkScratch scratch, int64_t M, cudaStream_t stream,
                    const std::string& context);

}  // namespace engine::custom::general::kernel

#pragma once
// Sums of one dense unit over a unit-major run of weights staged in shared memory, and the softmax
// of a row held on a warp's lanes: the image chain's steps (image_dense.cuh), on their own so a probe
// can time them (dev/probes/solo_dense.cu). dense_chain4 and dense_chain4_deep sum one run of
// rows (bias or zero, then k ascending, one fmaf per step: one chunk of DenseLayer::chunk_rows);
// ChunkRun and dense_chunks* a unit's whole chunked sum: the tiled kernels' order, so the same bits.
#include "engine/custom/fused/device_act.cuh"

// Trace builds of the image chain mark the first loads' arrival (image_chain.cu); nothing otherwise.
#ifndef CHAIN_MARK
#define CHAIN_MARK(i, fdep, idep) \
  do {                            \
  } while (0)
#endif

namespace engine::custom::fused {
namespace {

// s + sum over r < rows of a[r] * w[r], r ascending, over a unit-major run of weights (a cluster's
// few units per block): a and w 16-byte aligned, rows a multiple of 4. A unit's 400-step chain (f5)
// is the batch-1 forward's longest: a strided loop with two scalar loads per step (image_dense.cuh's
// dense_chain) is bound by shared-memory load latency (dev/probes/batch1_floor.cu measures such a
// loop alone); here a float4 of each operand serves 4 steps, and the next 8 steps' operands are
// loaded before the FMAs of these 8.
__device__ __forceinline__ float dense_chain4(const float* a, const float* w, int rows, float s) {
  {
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const int n4 = rows / 4;
    int k = 0;
    if (n4 >= 4) {
      float4 ca0 = a4[0], ca1 = a4[1], cw0 = w4[0], cw1 = w4[1];
      for (k = 2; k + 2 <= n4; k += 2) {
        const float4 na0 = a4[k], na1 = a4[k + 1], nw0 = w4[k], nw1 = w4[k + 1];
        s = fmaf(ca0.x, cw0.x, s); s = fmaf(ca0.y, cw0.y, s); s = fmaf(ca0.z, cw0.z, s); s = fmaf(ca0.w, cw0.w, s);
        s = fmaf(ca1.x, cw1.x, s); s = fmaf(ca1.y, cw1.y, s); s = fmaf(ca1.z, cw1.z, s); s = fmaf(ca1.w, cw1.w, s);
        ca0 = na0; ca1 = na1; cw0 = nw0; cw1 = nw1;
      }
      s = fmaf(ca0.x, cw0.x, s); s = fmaf(ca0.y, cw0.y, s); s = fmaf(ca0.z, cw0.z, s); s = fmaf(ca0.w, cw0.w, s);
      s = fmaf(ca1.x, cw1.x, s); s = fmaf(ca1.y, cw1.y, s); s = fmaf(ca1.z, cw1.z, s); s = fmaf(ca1.w, cw1.w, s);
    }
    for (; k < n4; ++k) {
      const float4 x = a4[k], y = w4[k];
      s = fmaf(x.x, y.x, s); s = fmaf(x.y, y.y, s); s = fmaf(x.z, y.z, s); s = fmaf(x.w, y.w, s);
    }
    return s;
  }
}

// The loop of dense_chain4_deep and dense_chunks4: `step(x, y)` on every quad of rows of a and w
// (float4s), in order, with the operands of the next 16 steps loaded before the steps of these 16.
// kAtOnce 1 or 2: a run of 1-7 quads (the clusters' 16-row chunks: 4) loads all its operands before
// its first step, instead of waiting for each quad's loads in turn. kAtOnce 2: a longer run's last
// 1-3 quads also load before its last group's steps. The image chain's clusters use kAtOnce 2
// (docs/design/custom-fused.md has the measurements).
template <int kAtOnce = 0, class Step>
__device__ __forceinline__ void deep_quads(const float* a, const float* w, int rows, Step step) {
  const float4* a4 = reinterpret_cast<const float4*>(a);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const int n4 = rows / 4;
  int k = 0;
  if (kAtOnce >= 1 && n4 > 0 && n4 < 8) {
    // Loads of quads past the run repeat its last quad (always in bounds) and are never used, so
    // they issue unconditionally, back to back; the steps keep the order.
    float4 ca[7], cw[7];
#pragma unroll
    for (int i = 0; i < 7; ++i) {
      const int q = min(i, n4 - 1);
      ca[i] = a4[q];
      cw[i] = w4[q];
    }
    CHAIN_MARK(1, ca[0].x + cw[0].x, n4);
#pragma unroll
    for (int i = 0; i < 7; ++i)
      if (i < n4) step(ca[i], cw[i]);
    return;
  }
  if (n4 >= 8) {
    float4 ca[4], cw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ca[i] = a4[i];
      cw[i] = w4[i];
    }
    CHAIN_MARK(1, ca[0].x + cw[0].x, n4);
    for (k = 4; k + 4 <= n4; k += 4) {
      float4 na[4], nw[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        na[i] = a4[k + i];
        nw[i] = w4[k + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) step(ca[i], cw[i]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ca[i] = na[i];
        cw[i] = nw[i];
      }
    }
    if constexpr (kAtOnce >= 2) {
      // The last 1-3 quads (n4 % 4; f5's 13-quad chunks: 1) load before the last group's steps
      // instead of after them (as above, quads past the run repeat its last one and go unused).
      float4 ra[3], rw[3];
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        const int q = min(k + i, n4 - 1);
        ra[i] = a4[q];
        rw[i] = w4[q];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) step(ca[i], cw[i]);
#pragma unroll
      for (int i = 0; i < 3; ++i)
        if (k + i < n4) step(ra[i], rw[i]);
      return;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) step(ca[i], cw[i]);
    }
  }
  for (; k < n4; ++k) {
    const float4 x = a4[k], y = w4[k];
    if (k == 0) CHAIN_MARK(1, x.x + y.x, n4);
    step(x, y);
  }
}

// dense_chain4 with the operands of the next 16 steps in flight instead of 8 (64 registers of
// operands: for the image chain's clusters, whose threads have 128): with 8 steps in flight the
// clusters' chains (f5: 400 steps at batch 1) ran at about twice the FMA's latency per step, the
// shared loads issued too shortly before their use. Same sums in the same order: the same bits.
template <int kAtOnce = 0>
__device__ __forceinline__ float dense_chain4_deep(const float* a, const float* w, int rows, float s) {
  deep_quads<kAtOnce>(a, w, rows, [&](const float4& x, const float4& y) {
    s = fmaf(x.x, y.x, s); s = fmaf(x.y, y.y, s); s = fmaf(x.z, y.z, s); s = fmaf(x.w, y.w, s);
  });
  return s;
}

// A unit's sum in the chunked order (DenseLayer::chunk_rows) over runs of rows taken one after
// another, with no restart at a chunk's end (a chain restarted per chunk pays its first loads'
// latency each time). `cur` is the
// running chain (in chunk 0 it started from the bias), `s` the settled sum (bias, chunk 0 and every
// finished later chunk), `left` the quads of rows before the current chunk ends, `rest` the quads
// after that up to in_padded. Every sum: one fmaf per step, each later chunk from zero, added to
// s in chunk order (__fadd_rn): the tiled kernels' order, so the same bits.
struct ChunkRun {
  float cur, s;
  int left, rest, chunk4;
  bool in0;
  // The state at row r0 (a multiple of 4) of a layer of K rows: `sum` is what saved_sum() gave at
  // r0 (at 0: the bias), `chunk_sum` what saved_chunk() gave (at 0: zero).
  __device__ __forceinline__ static ChunkRun at(int r0, int chunk, int K, float sum, float chunk_sum) {
    ChunkRun c;
    c.in0 = r0 < chunk;
    const int boundary = min(c.in0 ? chunk : (r0 / chunk + 1) * chunk, K);
    c.cur = c.in0 ? sum : chunk_sum;
    c.s = c.in0 ? 0.0f : sum;
    c.left = (boundary - r0) / 4;
    c.rest = (K - boundary) / 4;
    c.chunk4 = chunk / 4;
    return c;
  }
  __device__ __forceinline__ float saved_sum() const { return in0 ? cur : s; }
  __device__ __forceinline__ float saved_chunk() const { return in0 ? 0.0f : cur; }
  // Four steps (one quad of rows), then the chunk's end if it is there.
  __device__ __forceinline__ void step4(const float4& x, const float4& y) {
    cur = fmaf(x.x, y.x, cur); cur = fmaf(x.y, y.y, cur); cur = fmaf(x.z, y.z, cur); cur = fmaf(x.w, y.w, cur);
    if (--left == 0) {
      s = in0 ? cur : __fadd_rn(s, cur);
      cur = 0.0f;
      in0 = false;
      left = min(chunk4, rest);
      rest -= left;
    }
  }
};

// dense_chain4_deep's loop (16 steps in flight) over a unit-major run of `rows` rows (a multiple
// of 4), in the chunked order.
__device__ __forceinline__ void dense_chunks4(const float* a, const float* w, int rows, ChunkRun& c) {
  deep_quads(a, w, rows, [&](const float4& x, const float4& y) { c.step4(x, y); });
}

// The same over a column of a row-major slice (one block per image: w[r * stride]), 8 steps in
// flight (the depth that mode's loop had before the chunks: many threads share the latency).
__device__ __forceinline__ void dense_chunks_strided(const float* a, const float* w, int stride, int rows, ChunkRun& c) {
  const float4* a4 = reinterpret_cast<const float4*>(a);
  auto wq = [&](int q) {
    const float* p = w + 4 * q * stride;
    return make_float4(p[0], p[stride], p[2 * stride], p[3 * stride]);
  };
  const int n4 = rows / 4;
  int k = 0;
  if (n4 >= 4) {
    float4 ca0 = a4[0], ca1 = a4[1], cw0 = wq(0), cw1 = wq(1);
    for (k = 2; k + 2 <= n4; k += 2) {
      const float4 na0 = a4[k], na1 = a4[k + 1], nw0 = wq(k), nw1 = wq(k + 1);
      c.step4(ca0, cw0);
      c.step4(ca1, cw1);
      ca0 = na0; ca1 = na1; cw0 = nw0; cw1 = nw1;
    }
    c.step4(ca0, cw0);
    c.step4(ca1, cw1);
  }
  for (; k < n4; ++k) c.step4(a4[k], wq(k));
}

// softmax_row_warp (device_act.cuh) for a row held one value per lane (U <= 32; lanes >= U hold
// anything): the same operations on the same values, so the same bits.
__device__ __forceinline__ void softmax_lanes(float v, int U, float* dst, int lane) {
  float m = -__int_as_float(0x7f800000);
  if (lane < U) m = fmaxf(m, v);
  m = warp_max(m);
  float s = 0.0f;
  if (lane < U) s += expf(v - m);
  s = warp_sum(s);
  if (lane < U) dst[lane] = expf(v - m) / s;
}

}  // namespace
}  // namespace engine::custom::fused

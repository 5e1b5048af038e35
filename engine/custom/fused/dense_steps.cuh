#pragma once
// Sums of one dense unit over a unit-major run of weights staged in shared memory, and the softmax
// of a row held on a warp's lanes: the image chain's steps (image_dense.cuh), on their own so a probe
// can time them (tools/probes/solo_dense.cu). Every sum is bias, then k ascending, one fmaf per
// step: the tiled kernels' order, so the same bits.
#include "engine/custom/fused/device_act.cuh"

namespace engine::custom::fused {
namespace {

// s + sum over r < rows of a[r] * w[r], r ascending, over a unit-major run of weights (a cluster's
// few units per block): a and w 16-byte aligned, rows a multiple of 4. A unit's 400-step chain (f5)
// is the batch-1 forward's longest: the strided loop (image_dense.cuh's dense_chain, two scalar
// loads per step) ran at ~15 cycles per step there, bound by shared-memory loads
// (tools/probes/batch1_floor.cu: 13 cycles per step for such a loop alone); here a float4 of each
// operand serves 4 steps, and the next 8 steps' operands are loaded before the FMAs of these 8.
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

// dense_chain4 with the operands of the next 16 steps in flight instead of 8 (64 registers of
// operands: for the image chain's clusters, whose threads have 128): the clusters' chains (f5: 400 steps at batch 1) ran at ~9 cycles a step against the FMA's 4, the
// shared loads issued only 8 steps before their use. The image chain's default (ImageChainParams::dense_pipelined 2); session 10, H100,
// same call: batch 1 15.97-16.19 us against 16.16-16.32 with 8 steps (ENGINE_FUSED_IMAGE_DENSE=2) and
// 16.45-16.48 for the tree before; batch 64 22.3-22.6 against 22.7-22.8 and 23.1-23.5. Same sums in
// the same order: the same bits.
__device__ __forceinline__ float dense_chain4_deep(const float* a, const float* w, int rows, float s) {
  const float4* a4 = reinterpret_cast<const float4*>(a);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const int n4 = rows / 4;
  int k = 0;
  if (n4 >= 8) {
    float4 ca[4], cw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ca[i] = a4[i];
      cw[i] = w4[i];
    }
    for (k = 4; k + 4 <= n4; k += 4) {
      float4 na[4], nw[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        na[i] = a4[k + i];
        nw[i] = w4[k + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s = fmaf(ca[i].x, cw[i].x, s); s = fmaf(ca[i].y, cw[i].y, s); s = fmaf(ca[i].z, cw[i].z, s); s = fmaf(ca[i].w, cw[i].w, s);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ca[i] = na[i];
        cw[i] = nw[i];
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s = fmaf(ca[i].x, cw[i].x, s); s = fmaf(ca[i].y, cw[i].y, s); s = fmaf(ca[i].z, cw[i].z, s); s = fmaf(ca[i].w, cw[i].w, s);
    }
  }
  for (; k < n4; ++k) {
    const float4 x = a4[k], y = w4[k];
    s = fmaf(x.x, y.x, s); s = fmaf(x.y, y.y, s); s = fmaf(x.z, y.z, s); s = fmaf(x.w, y.w, s);
  }
  return s;
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

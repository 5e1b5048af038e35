#pragma once
// The image chain's dense part, piece by piece (image_chain.cu): which units a block of the team
// computes and how their weights are staged (DenseShare, request_slice), the sums over a staged
// slice (dense_chain, dense_chain4), the softmax on a warp's lanes, the biases' staging. Included by
// image_chain.cu only (it owns the shared-memory table declared here).
#include <cuda_pipeline.h>

#include "engine/custom/fused/conv_layers.cuh"
#include "engine/custom/fused/device_act.cuh"
#include "engine/custom/fused/fused_layers.hpp"
#include "engine/custom/fused/image_team.cuh"

namespace engine::custom::fused {
namespace {

// This block's units of a dense layer, [u0, u1) (multiples of 4), and how its slices of the
// weights are staged. One block per image: `slice_rows` whole rows of weight_t ([k][unit], one
// contiguous run per slice; each thread's unit strided by the row). A cluster (a few units per
// block): the unit-major copy, `slice_rows` rows of k for each of the block's `cols` units, unit
// after unit, `pitch` floats apart, read as float4s; the pitch is a multiple of 4 with pitch / 4
// odd, so the 8 lanes of each quarter-warp read from 8 different bank groups. Computed for every
// layer once per launch, in parallel, into s_share (the divisions sat on the batch-1 critical path
// when each layer worked them out in turn). The plan keeps 4 * units_padded <= kImageSliceFloats.
struct DenseShare {
  int u0, u1, cols, slice_rows, slices, pitch, unit_major;
  float inv_quads;  // 1 / (quads per unit in a full slice): request_slice's index split (Divisor)
  DenseShare() = default;
  __device__ DenseShare(const DenseLayer& D, int rank, int size, bool rank0_only = false) {
    const WorkRange<ClusterStore> r(D.units_padded, 4, rank, size);
    u0 = rank0_only ? 0 : r.lo;
    u1 = rank0_only ? (rank == 0 ? D.units_padded : 0) : r.hi;
    cols = u1 - u0;
    unit_major = size > 1;
    slice_rows = D.in_padded;
    pitch = cols;
    if (cols > 0 && !unit_major) {
      slice_rows = min(D.in_padded, kImageSliceFloats / cols / 4 * 4);
    } else if (cols > 0) {
      slice_rows = min(D.in_padded, kImageSliceFloats / cols / 4 * 4);
      pitch = slice_rows;
      if ((slice_rows / 4) % 2 == 0) {
        if (cols * (slice_rows + 4) <= kImageSliceFloats) pitch = slice_rows + 4;
        else pitch = slice_rows -= 4;
      }
    }
    slices = (D.in_padded + slice_rows - 1) / slice_rows;
    inv_quads = __frcp_rn(float(slice_rows / 4));
  }
};
__shared__ DenseShare s_share[kMaxDenseLayers];

// Requests slice `slice` of this block's units of a dense layer into `dst` (see DenseShare), 16-byte
// copies by threads t0 .. t0 + threads - 1, consecutive threads on consecutive 16 bytes; the caller
// commits the group.
__device__ __forceinline__ void request_slice(const DenseLayer& D, const DenseShare& sh, int slice, float* dst,
                                              int t0, int threads) {
  const int r0 = slice * sh.slice_rows;
  const int rows = min(sh.slice_rows, D.in_padded - r0);
  const int t = int(threadIdx.x) - t0;
  if (t < 0 || t >= threads || sh.cols == 0) return;
  if (!sh.unit_major) {  // whole rows of weight_t: one contiguous run
    const float* src = D.weight_t + size_t(r0) * D.units_padded;
    for (int i = t * 4; i < rows * sh.cols; i += threads * 4) __pipeline_memcpy_async(dst + i, src + i, 16);
    return;
  }
  const int quads = rows / 4;
  // The slice's quads per unit; the last slice may be shorter than the reciprocal was made for.
  const Divisor by_quads = quads * 4 == sh.slice_rows ? Divisor(quads, sh.inv_quads) : Divisor(quads);
  const float* src = D.weight_u + size_t(sh.u0) * D.in_padded + r0;
  for (int i = t; i < sh.cols * quads; i += threads) {
    const int c = by_quads.div(i), q = i - c * quads;
    __pipeline_memcpy_async(dst + c * sh.pitch + 4 * q, src + size_t(c) * D.in_padded + 4 * q, 16);
  }
}

// s + sum over r of a[r] * w[r * stride], one fmaf per step, r ascending (the tiled kernels' order,
// so the same bits), with the shared-memory loads of the next 8 steps issued before the FMAs of
// these 8 (one block per image, where many threads share the loads' latency).
// ENGINE_FUSED_IMAGE_DENSE=1 (fused_executable.cpp) keeps the plain loop for A/B.
template <bool kPipelined>
__device__ __forceinline__ float dense_chain(const float* a, const float* w, int stride, int rows, float s) {
  int r = 0;
  if constexpr (kPipelined) {
    if (rows >= 16) {
      float ca[8], cw[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        ca[i] = a[i];
        cw[i] = w[i * stride];
      }
      for (r = 8; r + 8 <= rows; r += 8) {
        float na[8], nw[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          na[i] = a[r + i];
          nw[i] = w[(r + i) * stride];
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) s = fmaf(ca[i], cw[i], s);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          ca[i] = na[i];
          cw[i] = nw[i];
        }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) s = fmaf(ca[i], cw[i], s);
    }
  }
#pragma unroll 8
  for (; r < rows; ++r) s = fmaf(a[r], w[r * stride], s);
  return s;
}

// The same sum over a unit-major slice (a cluster's few units per block): a and w 16-byte aligned,
// rows a multiple of 4. A unit's 400-step chain (f5) is the batch-1 forward's longest: the strided
// loop above (two scalar loads per step) ran at ~15 cycles per step there, bound by shared-memory
// loads (tools/probes/batch1_floor.cu: 13 cycles per step for such a loop alone); here a float4 of
// each operand serves 4 steps, and the next 8 steps' operands are loaded before the FMAs of these 8.
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

// dense_chain4 with the operands of the next 16 steps in flight instead of 8: the clusters' chains
// (f5: 400 steps at batch 1) ran at ~9 cycles a step against the FMA's 4, the shared loads issued
// only 8 steps before their use. The default (ImageChainParams::dense_pipelined 2); session 10, H100,
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

// Whether the last dense layer runs in block 0's first warp and ends in softmax_lanes: with
// asynchronous hand-offs (the layer stays in block 0), a softmax, at most 32 padded units in one
// slice (DenseShare gives block 0 all of them: unit u on lane u).
__device__ __forceinline__ bool softmax_in_lanes(const ImageChainParams& p, bool cluster) {
  if (!cluster || !p.handoff_async || !p.has_dense || !p.dense.softmax) return false;
  const DenseLayer& L = p.dense.layers[p.dense.layer_count - 1];
  return L.units_padded <= 32 && s_share[p.dense.layer_count - 1].slices == 1;
}

// Every dense layer's bias into shared memory (p.bias_off), by threads t0 .. t0 + threads - 1; the
// caller commits the group.
__device__ __forceinline__ void stage_dense_biases(const ImageChainParams& p, float* smem, int t0, int threads) {
  const int t = int(threadIdx.x) - t0;
  if (t < 0 || t >= threads || !p.has_dense) return;
  for (int l = 0; l < p.dense.layer_count; ++l)
    for (int i = t * 4; i < p.dense.layers[l].units_padded; i += threads * 4)
      __pipeline_memcpy_async(smem + p.bias_off[l] + i, p.dense.layers[l].bias + i, 16);
}

}  // namespace
}  // namespace engine::custom::fused

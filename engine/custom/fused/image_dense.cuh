#pragma once
// The image chain's dense part, piece by piece (image_chain.cu): which units a block of the team
// computes and how their weights are staged (DenseShare, request_slice), the sums over a staged
// slice (dense_steps.cuh), the softmax on a warp's lanes, the biases' staging. Included by
// image_chain.cu only (it owns the shared-memory table declared here).
#include <cuda_pipeline.h>

#include "engine/custom/fused/conv_layers.cuh"
#include "engine/custom/fused/dense_steps.cuh"
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
  // Warps that sum one chunk each of every unit (DenseLayer::chunk_rows; dense_units_parallel), or
  // 0: a cluster's block whose units fit one warp's lanes and one slice, when the layer has 2 to 15
  // chunks (a warp is left for the next slice's copies).
  int chunk_warps;
  float inv_quads;  // 1 / (quads per unit in a full slice): request_slice's index split (Divisor)
  DenseShare() = default;
  // run > 0: block r takes units [r * run, (r + 1) * run) (the dense tail's split, tail_runs).
  __device__ DenseShare(const DenseLayer& D, int rank, int size, bool rank0_only = false, int run = 0) {
    const WorkRange<ClusterStore> r(D.units_padded, 4, rank, size);
    u0 = rank0_only ? 0 : run > 0 ? min(rank * run, D.units_padded) : r.lo;
    u1 = rank0_only ? (rank == 0 ? D.units_padded : 0) : run > 0 ? min(u0 + run, D.units_padded) : r.hi;
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
    const int chunks = (D.in_padded + D.chunk_rows - 1) / D.chunk_rows;
    chunk_warps = unit_major && slices == 1 && cols > 0 && cols <= 32 && chunks >= 2 && (chunks + 1) * 32 <= kImageThreads
                      ? chunks
                      : 0;
  }
};
__shared__ DenseShare s_share[kMaxDenseLayers];

// The dense tail's runs for a team of `size` blocks (ImageChainParams::tail_runs, planned on the
// host by image_tail_runs: fused_plan.cpp); 0 without the tail. Planned on the host: worked out
// here, it raises the kernel's register pressure at the entry.
__device__ __forceinline__ int team_tail_runs(const ImageChainParams& p, int size) {
  return size >= 2 && size <= 8 ? p.tail_runs[31 - __clz(size)] : 0;
}

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

// A barrier of the block's first `threads` threads (whole warps) on hardware barrier `id` (0 is
// __syncthreads'): a dense layer's chunk warps meet on it while the others copy the next slice.
__device__ __forceinline__ void warps_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Whether the last dense layer runs in block 0's first warp and ends in softmax_lanes: with
// asynchronous hand-offs (the layer stays in block 0), a softmax, at most 32 padded units in one
// slice (DenseShare gives block 0 all of them: unit u on lane u).
__device__ __forceinline__ bool softmax_in_lanes(const ImageChainParams& p, bool cluster) {
  if (!cluster || !p.has_dense || !p.dense.softmax) return false;
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

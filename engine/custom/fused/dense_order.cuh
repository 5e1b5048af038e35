#pragma once
// The summation order of a fused dense output (fused_layers.hpp, DenseLayer::chunk_rows), as pieces
// every dense kernel uses, so that they all give the same bits: up to kDenseChunks partial sums over
// consecutive runs of chunk_rows rows, p0 from the bias and the others from 0, each k ascending with
// one fmaf per step, then ((p0 + p1) + p2) + p3. The chunks are independent chains: a kernel may sum
// them one after another (the tiled dense chain, one block per image) or on separate lanes (the
// image chain's clusters at small batches, where one output's chain is the critical path).

#include "engine/custom/fused/fused_layers.hpp"

namespace engine::custom::fused {

static_assert(kDenseChunks >= 1 && kDenseChunks <= 4, "fold_lane_chunks folds at most 4 lanes");

// One output summed chunk after chunk: `part` is the chunk being summed, `total` the fold of the
// chunks before it.
struct ChunkedSum {
  float part, total;
  __device__ explicit ChunkedSum(float bias) : part(bias), total(0.0f) {}
  __device__ ChunkedSum(float part_, float total_) : part(part_), total(total_) {}
  // Row g > 0 starts a chunk: fold the one that ends.
  __device__ __forceinline__ void next_chunk(int g, int chunk_rows) {
    total = g == chunk_rows ? part : total + part;
    part = 0.0f;
  }
  __device__ __forceinline__ float result(int in_padded, int chunk_rows) const {
    return in_padded > chunk_rows ? total + part : part;
  }
};

// Rows [r0, r0 + rows) of a layer, split where chunks start: fold(g) at each chunk start g inside
// the range, run(k0, k1) for each piece (k relative to r0). `next` is the first chunk start >= r0
// (chunk_rows for r0 = 0) and is left at the first one >= r0 + rows, ready for the next slice: no
// division (a run-time remainder per piece cost the small batches' sequential sums ~100 cycles of
// latency each, session 9).
template <class Fold, class Run>
__device__ __forceinline__ void chunk_runs(int r0, int rows, int& next, int chunk_rows, Fold&& fold, Run&& run) {
  for (int k = 0; k < rows;) {
    if (r0 + k == next) {
      fold(next);
      next += chunk_rows;
    }
    const int end = min(rows, next - r0);
    run(k, end);
    k = end;
  }
}

// `next` of chunk_runs moved past rows up to r_end (for callers that keep one per slice).
__device__ __forceinline__ int chunk_start_from(int next, int r_end, int chunk_rows) {
  while (next < r_end) next += chunk_rows;
  return next;
}

// The fold of the partial sums held by lanes 4j .. 4j + 3 (chunk q on lane 4j + q), valid on lane
// 4j: the same additions in the same order as ChunkedSum. Every lane of the warp must call it.
__device__ __forceinline__ float fold_lane_chunks(float p, int chunks) {
  const float p1 = __shfl_down_sync(0xffffffffu, p, 1);
  const float p2 = __shfl_down_sync(0xffffffffu, p, 2);
  const float p3 = __shfl_down_sync(0xffffffffu, p, 3);
  float s = p;
  if (chunks > 1) s = s + p1;
  if (chunks > 2) s = s + p2;
  if (chunks > 3) s = s + p3;
  return s;
}

}  // namespace engine::custom::fused

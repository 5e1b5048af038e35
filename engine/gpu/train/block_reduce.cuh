#pragma once
// A fixed-shape summation tree over one block of kReduceThreads threads: partial sums in shared
// memory, halved pairwise (t += t + half) until one is left. The same shape every launch, so the
// same bits; no atomics, no warp-shuffle order that depends on the architecture.
#include "engine/gpu/train/train_launch.hpp"

namespace engine::gpu::train {

// Every thread of the block must call it; thread 0 gets the total (others get garbage).
__device__ inline float block_tree_sum(float v, float* shared /* kReduceThreads floats */) {
  const int t = threadIdx.x;
  shared[t] = v;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half >>= 1) {
    if (t < half) shared[t] = shared[t] + shared[t + half];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();  // shared may be reused by the caller's next call
  return total;
}

}  // namespace engine::gpu::train

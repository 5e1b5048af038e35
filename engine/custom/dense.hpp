#pragma once
// dense_forward: y[b, u] = act(bias[u] + sum_k x[b, k] * w[u, k]), our own tiled SGEMM
// (Y = X * W^T with X [n, K] and W [units, K] both row-major, as stored). A block of 16x16 threads
// computes a (16*TM) x (16*TN) tile of Y; per step of 16 along K it stages the X and W tiles in
// shared memory (transposed, padded against bank conflicts), each thread keeps a TM x TN micro-tile
// of accumulators in registers, and bias + activation are applied in the epilogue.
// Accumulation is in double, bias first, k ascending: exactly the CPU reference's order, so the
// result does not depend on the tile shape or the batch size.
#include <cuda_runtime_api.h>

#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom {

struct DenseArgs {
  const float* x = nullptr;       // [n, in_features]
  const float* weight = nullptr;  // [units, in_features]
  const float* bias = nullptr;    // [units] or null
  float* y = nullptr;             // [n, units]; must not overlap x
  int in_features = 1, units = 1;
  Activation activation = Activation::None;
};

struct DenseLaunch {
  int micro = 4;  // TM = TN: 4 -> 64x64 tiles, 2 -> 32x32, 1 -> 16x16
  int tile() const { return 16 * micro; }
};

// Picks the largest tile that still gives the device enough blocks at max_batch.
DenseLaunch dense_plan(int in_features, int units, int max_batch, const DeviceLimits& limits);
void dense_forward(const DenseArgs& args, const DenseLaunch& launch, int n, cudaStream_t stream,
                   const std::string& context);

}  // namespace engine::custom

#pragma once
// Softmax + cross-entropy, fused, on the logits z [n, k] (engine/core/train.hpp): per sample the
// probabilities, the loss -log softmax(z)[label] and, when training, dz = (p - onehot) / n; then
// the batch's loss sum (in double, in sample order) and correct count (argmax, first maximum).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace engine::gpu::train {

// What one batch gave, in device memory; copied back with one small cudaMemcpyAsync.
struct LossResult {
  double loss_sum;
  long long correct;
};

// labels: n bytes on the device, each < k (the host checked them). inv_n = 1.0f / float(n), as
// host_ops.hpp forms it. dz may be null (evaluate). losses: n floats of scratch. One block.
void softmax_cross_entropy(const float* z, const uint8_t* labels, float* probs, float* dz, float* losses,
                           LossResult* result, int n, int k, float inv_n, cudaStream_t stream);

}  // namespace engine::gpu::train

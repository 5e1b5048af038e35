// The fused softmax + cross-entropy kernel (fp32 per sample, expf/logf accurate, --fmad=false).
// One block: its threads take samples, then thread 0 adds the losses in sample order in double, as
// the host trainer does, so the batch's sum needs no second kernel and no atomics.
#include "engine/gpu/train/loss_train.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::gpu::train {
namespace {

constexpr int kLossThreads = 256;

__global__ void softmax_cross_entropy_kernel(const float* __restrict__ z, const uint8_t* __restrict__ labels,
                                             float* __restrict__ probs, float* __restrict__ dz,
                                             float* __restrict__ losses, LossResult* __restrict__ result, int n,
                                             int k, float inv_n) {
  __shared__ int hits[kLossThreads];
  int my_hits = 0;
  for (int s = threadIdx.x; s < n; s += kLossThreads) {
    const float* zs = z + (long long)s * k;
    float* ps = probs + (long long)s * k;
    const int label = labels[s];
    int best = 0;  // first maximum (std::max_element)
    for (int i = 1; i < k; ++i)
      if (zs[best] < zs[i]) best = i;
    const float m = zs[best];
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum = sum + expf(zs[i] - m);
    const float log_sum = logf(sum);
    for (int i = 0; i < k; ++i) {
      const float p = expf(zs[i] - m) / sum;
      ps[i] = p;
      if (dz) dz[(long long)s * k + i] = (p - (i == label ? 1.0f : 0.0f)) * inv_n;
    }
    losses[s] = (m + log_sum) - zs[label];
    my_hits += best == label ? 1 : 0;
  }
  hits[threadIdx.x] = my_hits;
  __syncthreads();  // the block's global writes (losses) are visible to thread 0 after this
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int s = 0; s < n; ++s) total += double(losses[s]);
    long long correct = 0;
    for (int t = 0; t < kLossThreads; ++t) correct += hits[t];
    result->loss_sum = total;
    result->correct = correct;
  }
}

}  // namespace

void softmax_cross_entropy(const float* z, const uint8_t* labels, float* probs, float* dz, float* losses,
                           LossResult* result, int n, int k, float inv_n, cudaStream_t stream) {
  softmax_cross_entropy_kernel<<<1, kLossThreads, 0, stream>>>(z, labels, probs, dz, losses, result, n, k, inv_n);
  CUDA_CHECK_LAUNCH("train: softmax + cross-entropy");
}

}  // namespace engine::gpu::train

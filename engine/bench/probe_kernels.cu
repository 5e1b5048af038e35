#include "engine/bench/probe_kernels.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::bench {
namespace {

__global__ void fma_probe_kernel(float* out, int iters, float a, float b) {
  float x0 = threadIdx.x * 1e-3f, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3;
  float x4 = x0 + 4, x5 = x0 + 5, x6 = x0 + 6, x7 = x0 + 7;
  // Unrolled so loop counting takes a negligible share of the issue slots (FP32 FMA throughput
  // equals the issue rate on Hopper: any other instruction costs an FMA).
#pragma unroll 16
  for (int i = 0; i < iters; ++i) {
    x0 = fmaf(x0, a, b);
    x1 = fmaf(x1, a, b);
    x2 = fmaf(x2, a, b);
    x3 = fmaf(x3, a, b);
    x4 = fmaf(x4, a, b);
    x5 = fmaf(x5, a, b);
    x6 = fmaf(x6, a, b);
    x7 = fmaf(x7, a, b);
  }
  const float s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  if (s == -1.2345f) out[threadIdx.x] = s;
}

}  // namespace

void launch_fma_probe(float* out, int blocks, int threads, int iters, cudaStream_t stream) {
  fma_probe_kernel<<<blocks, threads, 0, stream>>>(out, iters, 0.99999f, 1e-5f);
  CUDA_CHECK_LAUNCH("fp32 FMA probe");
}

}  // namespace engine::bench

#pragma once
// Kernels of the device probe (device_probe.cpp): no fmt here (.cu files; see engine/custom).
#include <cuda_runtime_api.h>

namespace engine::bench {

// Each thread runs 8 independent chains of `iters` fp32 FMAs in registers: 16 * iters flops per
// thread. `out` is written only under a condition that never holds, so the work is kept.
void launch_fma_probe(float* out, int blocks, int threads, int iters, cudaStream_t stream);

}  // namespace engine::bench

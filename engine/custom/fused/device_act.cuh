#pragma once
// Activations for the fused fp32 kernels: CUDA's accurate single-precision functions (tanhf,
// expf: a few ulp; never the .approx instructions --use_fast_math would pick), evaluated in the
// same order everywhere so a result does not depend on where it is computed.
#include <cuda_runtime.h>

#include "engine/custom/fused/fused_layers.hpp"

namespace engine::custom::fused {

__device__ __forceinline__ float apply_act(float v, Act act) {
  switch (act) {
    case Act::Relu: return v > 0.0f ? v : 0.0f;
    case Act::Tanh: return tanhf(v);
    case Act::Sigmoid: return 1.0f / (1.0f + expf(-v));
    case Act::None: break;
  }
  return v;
}

// Not inlined: a register-tiled epilogue calls it for every accumulator (32 call sites in one
// unrolled loop); inlined, each call site carried its own copy of tanhf/expf and the kernel's hot
// code stopped fitting in the instruction cache (Nsight Compute, conv chain v2: 4.1 of 11.3 stall
// cycles per instruction waiting for instruction fetch).
static __device__ __noinline__ float apply_epilogue(float v, const Epilogue& e) {
  for (int i = 0; i < e.count; ++i) v = apply_act(v, e.acts[i]);
  return v;
}

}  // namespace engine::custom::fused

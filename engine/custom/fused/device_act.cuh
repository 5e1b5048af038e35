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

__device__ __forceinline__ float apply_epilogue(float v, const Epilogue& e) {
  for (int i = 0; i < e.count; ++i) v = apply_act(v, e.acts[i]);
  return v;
}

}  // namespace engine::custom::fused

#pragma once
// Device-side helpers shared by the custom kernels (.cu files only).
//
// Numerics: the CPU reference computes every dot product and window sum in double and rounds once,
// and evaluates tanh/exp in double. The custom kernels do the same (products of two floats are
// exact in double, so FMA or not gives the same sum): results match the reference to its last bit
// in most elements, and the fused epilogue produces exactly what the unfused kernels would.
#include <cuda_runtime.h>

#include "engine/custom/launch_common.hpp"

namespace engine::custom {

// The activation of a value already rounded to float, evaluated in double and rounded once
// (exactly what the CPU reference and the unfused elementwise kernel do).
__device__ __forceinline__ float apply_activation(float v, Activation act) {
  switch (act) {
    case Activation::Relu: return v > 0.0f ? v : 0.0f;
    case Activation::Tanh: return float(tanh(double(v)));
    case Activation::Sigmoid: return float(1.0 / (1.0 + exp(-double(v))));
    case Activation::None: break;
  }
  return v;
}

}  // namespace engine::custom

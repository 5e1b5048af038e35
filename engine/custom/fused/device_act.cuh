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
// cycles per instruction waiting for instruction fetch). The epilogue comes by value, in registers:
// by reference it was a generic pointer into the kernel's parameter block, and every call read it
// through L1 from memory (Nsight Compute, image chain at batch 1: dependent loads on the critical
// path, and each cluster barrier invalidates L1).
static_assert(kMaxEpilogueActs <= 3 && int(Act::Sigmoid) < 4, "an epilogue packs into 8 bits");

static __device__ __noinline__ float apply_epilogue_acts(float v, unsigned code) {
  // code: count in bits 0-1, then 2 bits per activation (Act values fit in 2 bits).
  const unsigned count = code & 3u;
  for (unsigned i = 0; i < count; ++i) v = apply_act(v, Act((code >> (2 + 2 * i)) & 3u));
  return v;
}

__device__ __forceinline__ float apply_epilogue(float v, const Epilogue& e) {
  if (e.count == 0) return v;
  unsigned code = unsigned(e.count);
  for (int i = 0; i < e.count; ++i) code |= unsigned(e.acts[i]) << (2 + 2 * i);
  return apply_epilogue_acts(v, code);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  // A fixed butterfly: every lane ends with the same sum, the same way every run.
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
  return v;
}

// Softmax of one row of U values by one warp (all 32 lanes call it): the max, then the sum of
// exp(x - max) (each lane's terms in u order, then the butterfly), then each probability. Both
// fused kernels that end a chain with softmax call this, so an image's probabilities have the same
// bits whichever kernel ran it.
__device__ __forceinline__ void softmax_row_warp(const float* row, int U, float* dst, int lane) {
  float m = -__int_as_float(0x7f800000);
  for (int u = lane; u < U; u += 32) m = fmaxf(m, row[u]);
  m = warp_max(m);
  float s = 0.0f;
  for (int u = lane; u < U; u += 32) s += expf(row[u] - m);
  s = warp_sum(s);
  for (int u = lane; u < U; u += 32) dst[u] = expf(row[u] - m) / s;
}

}  // namespace engine::custom::fused

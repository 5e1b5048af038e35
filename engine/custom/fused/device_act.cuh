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
// code stopped fitting in the instruction cache (warps stalled on instruction fetch;
// docs/design/custom-fused.md). N values per call (the register tile's
// pairs and quads), so the call and the dispatch on the code are paid once per N results.
//
// The epilogue arrives packed in one word (Epilogue::code), read by the caller once per layer:
// re-packing it from the kernel's parameter block at every call costs dozens of constant-bank
// loads, shifts and ORs before each activation call (docs/design/custom-fused.md).
static_assert(kMaxEpilogueActs <= 3 && int(Act::Sigmoid) < 4, "an epilogue packs into 8 bits");

template <int N>
struct Floats {
  float v[N];
};

template <int N>
static __device__ __noinline__ Floats<N> apply_epilogue_acts(Floats<N> x, unsigned code) {
  const unsigned count = code & 3u;
  for (unsigned i = 0; i < count; ++i) {
    switch (Act((code >> (2 + 2 * i)) & 3u)) {  // one dispatch for the N values
      case Act::Relu:
#pragma unroll
        for (int j = 0; j < N; ++j) x.v[j] = apply_act(x.v[j], Act::Relu);
        break;
      case Act::Tanh:
#pragma unroll
        for (int j = 0; j < N; ++j) x.v[j] = apply_act(x.v[j], Act::Tanh);
        break;
      case Act::Sigmoid:
#pragma unroll
        for (int j = 0; j < N; ++j) x.v[j] = apply_act(x.v[j], Act::Sigmoid);
        break;
      case Act::None: break;
    }
  }
  return x;
}

__device__ __forceinline__ float apply_epilogue(float v, unsigned code) {
  if (code == 0) return v;
  return apply_epilogue_acts<1>(Floats<1>{{v}}, code).v[0];
}

__device__ __forceinline__ float apply_epilogue(float v, const Epilogue& e) { return apply_epilogue(v, e.code); }

// The most common epilogue, a lone tanh, is inlined where values come in pairs and quads: the call,
// its register moves and the dispatch cost about 8 instructions per value, half of tanhf's own.
inline constexpr unsigned kTanhOnly = 1u | (unsigned(Act::Tanh) << 2);

// a and b through the same epilogue, one call.
__device__ __forceinline__ void apply_epilogue2(float& a, float& b, unsigned code) {
  if (code == 0) return;
  if (code == kTanhOnly) {
    a = tanhf(a);
    b = tanhf(b);
    return;
  }
  const Floats<2> r = apply_epilogue_acts<2>(Floats<2>{{a, b}}, code);
  a = r.v[0];
  b = r.v[1];
}

__device__ __forceinline__ void apply_epilogue4(float (&x)[4], unsigned code) {
  if (code == 0) return;
  if (code == kTanhOnly) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = tanhf(x[j]);
    return;
  }
  const Floats<4> r = apply_epilogue_acts<4>(Floats<4>{{x[0], x[1], x[2], x[3]}}, code);
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = r.v[j];
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

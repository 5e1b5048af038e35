#pragma once
// One value quantized as the reference's int8 emulation does (engine/reference/reduced_precision.hpp):
// clamp(rne(x / s), -127, 127), 0 when s is 0, the quotient's rounding exactly that of an IEEE
// division. The division costs ~10 multiplications and runs for every operand a kernel quantizes (a
// convolution's input kh * kw times over), so: zeros (padding, relu outputs) return at once; otherwise
// t = x * (1 / s), within 2 ulps of x / s, rounds the same way unless it lies within 1e-3 of a
// half-integer (below 128 an ulp is under 1e-5; above, the clamp decides), and only then is the
// division computed. A NaN gives 127 (fmin / fmax return the other operand), +-inf +-127, as the
// emulation's. Host and device (tests/gpu/emulated checks it against the division on ~1.7 M values).
#include <cuda_runtime.h>

#include <cmath>

namespace engine::gpu {

__host__ __device__ __forceinline__ int quantize_int8_value(float x, float s, float inv_s) {
  if (s == 0.0f || x == 0.0f) return 0;
  float t = x * inv_s;
  if (fabsf(t - floorf(t) - 0.5f) < 1e-3f) {
#ifdef __CUDA_ARCH__
    t = __fdiv_rn(x, s);
#else
    t = x / s;
#endif
  }
#ifdef __CUDA_ARCH__
  const float q = rintf(t);  // round to nearest even, as std::nearbyint
#else
  const float q = std::nearbyint(t);
#endif
  return int(fmaxf(-127.0f, fminf(127.0f, q)));
}

}  // namespace engine::gpu

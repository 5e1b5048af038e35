#pragma once
// Emulated reduced precisions for the reference backend: what a device computing in
// fp16, bf16 or int8 would store, applied to the reference's double-accumulated arithmetic, so each
// precision's accuracy is measured (engine run --backend reference --precision P) before any device
// kernel exists, and device kernels have a reference to be checked against.
//   fp16 / bf16: weights, biases and every value (the preprocessed input and each node's output)
//     rounded to the format (round to nearest even, as a conversion instruction does); sums in double
//     (tensor cores sum in fp32: the difference is far below the storage rounding).
//   int8 (post-training quantization, symmetric, zero point 0, as TensorRT's): each conv2d and dense
//     reads its input quantized per tensor, q = clamp(rne(x / s), -127, 127) with s = range / 127 from
//     the model's calibration (engine calibrate), and its weights quantized per output channel with
//     s_o = max |w_o| / 127; products and sums as the reference computes them (exact for int8 x int8
//     sums of this size, up to the float rounding of q * s); bias, activations, pooling and softmax
//     in float.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace engine::reference {

inline float round_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;  // inf and NaN stay
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// To the nearest half (IEEE binary16), ties to even, as a float: written out, since _Float16 is not
// available on every compiler and target (clang for x86-64 without AVX512-FP16 refuses it).
inline float round_to_fp16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return x;                                // inf and NaN stay
  if (a >= 0x477FF000u) return sign ? -INFINITY : INFINITY;      // 65520 and up round past 65504
  if (a >= 0x38800000u) {                                        // a normal half (>= 2^-14): 10 bits
    uint32_t r = (a + 0xFFFu + ((a >> 13) & 1u)) & 0xFFFFE000u;  // round to nearest even on bit 13
    r |= sign;
    std::memcpy(&x, &r, 4);
    return x;
  }
  // A subnormal half: multiples of 2^-24 (the scaling by 2^24 is exact; nearbyint rounds to even).
  const float q = std::nearbyint(std::fabs(x) * 0x1p24f) * 0x1p-24f;
  return sign ? -q : q;
}

// x quantized with scale s and dequantized: clamp(rne(x / s), -127, 127) * s; s = 0 gives 0.
inline float fake_quantize(float x, float s) {
  if (s == 0.0f) return 0.0f;
  const float q = std::nearbyint(x / s);  // the default rounding mode: to nearest even
  return std::fmax(-127.0f, std::fmin(127.0f, q)) * s;
}

// Weights of `rows` output channels of `per_row` values each, quantized per channel.
inline std::vector<float> quantize_per_channel(const float* w, int64_t rows, int64_t per_row) {
  std::vector<float> out(size_t(rows * per_row));
  for (int64_t r = 0; r < rows; ++r) {
    float hi = 0;
    for (int64_t i = 0; i < per_row; ++i) hi = std::fmax(hi, std::fabs(w[r * per_row + i]));
    const float s = hi / 127.0f;
    for (int64_t i = 0; i < per_row; ++i) out[size_t(r * per_row + i)] = fake_quantize(w[r * per_row + i], s);
  }
  return out;
}

}  // namespace engine::reference

#pragma once
// The int8 matrix products of the cpu backend's int8 path, one set per instruction set, chosen at
// run time (int8_executable.cpp): c[i][j] = sum_k a[i][k] * w[j][k] with a uint8 (an activation
// quantized to q in [-127, 127], stored as q + 128), w int8 (a weight quantized per output
// channel), sums in int32. Every product and sum is exact in int32 (|sum| < 255 * 127 * k, far
// below 2^31 for any k a model here has), so every set gives the same bits whatever its order.
#include <cstddef>
#include <cstdint>

#include "engine/cpu/int8/int8_ops.hpp"

namespace engine::cpu::int8 {

// K (the reduction length) is padded with zeros to a multiple of this in a and in w.
inline constexpr int kKStep = 4;
// Rows of c are written for columns [0, round_up(n, kColumnStep)): ldc must be at least that.
inline constexpr int kColumnStep = 16;

// Static, as every inline function the -m-flagged files share: no copy built with -m flags can stand
// in for another file's at link time.
static inline int round_up(int x, int step) { return (x + step - 1) / step * step; }

// One image's stride-1 convolution of a one-channel quantized image (a network's first layer): with
// one channel an im2col row is kw bytes per window row and few output channels fill few lanes, so
// this computes output pixels across the lanes instead, each int32 lane the exact sum of its
// pixel's taps, then the epilogue (requantize_rows' operations), then `pool` (maxpool's or
// avgpool's operations), written NHWC: the same bits as im2col, product, epilogue and pool.
struct PlaneConv {
  const uint8_t* padded = nullptr;  // the quantized padded image [rows][wp], kIm2colSlack bytes after it
  int wp = 0, kh = 0, kw = 0;
  int out_h = 0, out_w = 0;         // the convolution's output (before the pool)
  // Four int8 weights of a window row per int32 (zeros past kw), as [ceil(n / 16)][kh * ceil(kw / 4)][16]
  // (zeros past n), and each of the kh * ceil(kw / 4) groups' byte offset in the padded image.
  const int32_t* taps = nullptr;
  const int32_t* tap_offsets = nullptr;
  int tap_groups = 0;
  int n = 0;
  const int32_t* offset = nullptr;  // as requantize_rows'
  const double* scale = nullptr;
  const double* bias = nullptr;
  Act act = Act::None;
  Pool pool = Pool::None;
  float* scratch = nullptr;  // plane_conv_scratch(n, out_w) floats
  float* y = nullptr;
};
static inline int64_t plane_conv_scratch(int n, int out_w) { return 3 * int64_t(n) * ((out_w + 31) / 32 * 32); }

struct Int8Gemm {
  const char* name = "";
  // Bytes of the packed form of an [n][kp] int8 weight matrix (kp a multiple of kKStep).
  size_t (*packed_bytes)(int n, int kp) = nullptr;
  // w [n][kp] row-major to the layout `gemm` reads (zeros past n).
  void (*pack)(const int8_t* w, int n, int kp, uint8_t* out) = nullptr;
  // a [m][kp] row-major; c [m][ldc]; columns n..round_up(n, kColumnStep) of c get unspecified values.
  void (*gemm)(const uint8_t* a, int m, int kp, const uint8_t* packed, int n, int32_t* c, int ldc) = nullptr;
  // The element-wise steps around the product, as int8_ops.hpp defines them (quantize,
  // requantize_rows): correctly rounded IEEE operations only, so a vectorised version gives the
  // portable one's bits.
  void (*quantize)(const float* x, int64_t n, float scale, uint8_t* q) = nullptr;
  void (*requantize_rows)(const int32_t* c, int ldc, int rows, int n, const int32_t* offset, const double* scale,
                          const double* bias, Act act, float* y) = nullptr;
  // PlaneConv; nullptr where the set has none (the convolution then goes through im2col).
  void (*plane_conv)(const PlaneConv& c) = nullptr;
};

// AVX-512 VNNI (vpdpbusd): weights as [n/16][kp/4][16][4]. nullptr where not compiled in.
const Int8Gemm* int8_gemm_avx512vnni();
// AVX2 (vpmaddwd on int16): weights as [n/8][kp/2][8][2] int16.
const Int8Gemm* int8_gemm_avx2();
// Plain C++: weights as given.
const Int8Gemm& int8_gemm_portable();

}  // namespace engine::cpu::int8

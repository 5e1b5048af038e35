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
// this computes output pixels across the lanes instead, 16 pixels in row-major order at a time
// (rows end mid-group: no lane idles), each int32 lane the exact sum of its pixel's taps, then the
// epilogue (requantize_rows' operations), then `pool` (maxpool's or avgpool's operations), written
// NHWC: the same bits as im2col, product, epilogue and pool.
//
// A group's lanes gather their activations from one 64-byte load at `origin` plus a tap group's
// offset: 128-bit lane L takes dwords dwords[4L..4L+3] of it (vpermd), then lane l's four bytes
// are bytes[4l..4l+3] of its 128-bit lane (vpshufb).
struct PlaneGroup {
  int32_t dwords[16];
  uint8_t bytes[64];
  int32_t origin = 0;  // the group's first pixel's window origin in the padded image
};
struct PlaneConv {
  const uint8_t* padded = nullptr;  // the quantized padded image, 64 readable bytes after it
  int out_h = 0, out_w = 0;         // the convolution's output (before the pool)
  const PlaneGroup* groups = nullptr;  // ceil(out_h * out_w / 16)
  // Four int8 weights of a window row per int32 (zeros past kw), as [ceil(n / 16)][tap_groups][16]
  // (zeros past n), and each of the tap_groups (kh * ceil(kw / 4)) offsets from a window's origin.
  const int32_t* taps = nullptr;
  const int32_t* tap_offsets = nullptr;
  int tap_groups = 0;
  int n = 0;
  const int32_t* offset = nullptr;  // as requantize_rows'
  const double* scale = nullptr;
  const double* bias = nullptr;
  Act act = Act::None;
  Pool pool = Pool::None;
  float* scratch = nullptr;  // plane_conv_scratch(n, out_h, out_w) floats
  float* y = nullptr;
};
// Floats of PlaneConv::scratch: the output planes of whole groups, slack, a pooled row's planes.
static inline int64_t plane_conv_scratch(int n, int out_h, int out_w) {
  return int64_t(n) * ((int64_t(out_h) * out_w + 15) / 16 * 16) + 32 + int64_t(n) * ((out_w / 2 + 15) / 16 * 16);
}

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

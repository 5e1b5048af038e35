#pragma once
// The int8 path's operations around the int8 products (int8_executable.hpp), on NHWC values: one
// build for every instruction set (compiled without -m flags and with -ffp-contract=off), so they
// give the same bits whichever int8 product runs. Each computes an element as the reference backend
// does (engine/reference), in the same order of operations, except tanh (rational_tanh, as the fp32
// kernels compute it).
#include <cmath>
#include <cstdint>

#include "formats/model.hpp"

namespace engine::cpu::int8 {

// The activation a conv2d or dense runs in its epilogue (the next node, when only it reads the output).
enum class Act { None, Relu, Tanh };

// A non-overlapping 2x2 pool (stride 2, no padding, the last odd row or column dropped) that a
// convolution runs on its own output (int8_gemm.hpp, PlaneConv), as maxpool and avgpool compute it.
enum class Pool { None, Max, Avg };

// The fp32 kernels' rational tanh (engine/cpu/simd.hpp: Eigen's 13/6 minimax form, about 1 ulp)
// as their FMA instruction sets compute it: each multiply-add of the two polynomials fused
// (std::fma here, vfmadd in the vectorised versions: one rounding either way), so every
// instruction set's version gives the same bits; a library tanh per element would cost more than
// LeNet's whole int8 c1. Static: a copy per translation unit, so none built with -m flags can
// stand in for the portable one at link time.
static inline float rational_tanh(float v) {
  float c = v > -7.90531110763549805f ? v : -7.90531110763549805f;
  c = c < 7.90531110763549805f ? c : 7.90531110763549805f;
  const float x2 = c * c;
  float p = -2.76076847742355e-16f;
  p = std::fma(p, x2, 2.00018790482477e-13f);
  p = std::fma(p, x2, -8.60467152213735e-11f);
  p = std::fma(p, x2, 5.12229709037114e-08f);
  p = std::fma(p, x2, 1.48572235717979e-05f);
  p = std::fma(p, x2, 6.37261928875436e-04f);
  p = std::fma(p, x2, 4.89352455891786e-03f);
  p = p * c;
  float q = 1.19825839466702e-06f;
  q = std::fma(q, x2, 1.18534705686654e-04f);
  q = std::fma(q, x2, 2.26843463243900e-03f);
  q = std::fma(q, x2, 4.89352518554385e-03f);
  const float r = p / q;
  const float ax = v < 0.0f ? -v : v;
  return ax < 0.0004f ? v : r;
}

struct Hwc {
  int height = 1, width = 1, channels = 1;
};

// q + 128 for q = clamp(rne(x / scale), -127, 127) (a NaN to 127, as fmin/fmax do); scale 0: q = 0.
void quantize(const float* x, int64_t n, float scale, uint8_t* q);

// The quantized copy of an NHWC image with a border of q = 0 (128): [top + H + bottom][left + W + right][C],
// each row by `quantize` (one of the instruction sets' versions of the above).
void quantize_padded(const float* x, Hwc in, const formats::Window2D& win, float scale, uint8_t* out,
                     void (*quantize)(const float*, int64_t, float, uint8_t*));

// Bytes that im2col may read past the padded image and write past its last row.
inline constexpr int kIm2colSlack = 64;

// Rows [first, first + rows) of the im2col matrix of a padded quantized image: row (i, j) holds the
// window's taps in (p, q, c) order, then zeros up to kp.
void im2col(const uint8_t* padded, Hwc in, const formats::Window2D& win, int out_width, int first, int rows, int kp,
            uint8_t* out);

// y[i][o] = act(float(double(c[i][o] - offset[o]) * scale[o] + bias[o])).
void requantize_rows(const int32_t* c, int ldc, int rows, int n, const int32_t* offset, const double* scale,
                     const double* bias, Act act, float* y);

void maxpool(const float* x, Hwc in, const formats::Window2D& win, Hwc out, float* y);
// `sum` holds out.channels doubles.
void avgpool(const float* x, Hwc in, const formats::Window2D& win, bool count_include_pad, Hwc out, float* y,
             double* sum);
void relu(const float* x, int64_t n, float* y);
void tanh(const float* x, int64_t n, float* y);
void sigmoid(const float* x, int64_t n, float* y);
void softmax(const float* x, int64_t n, float* y);
void add(const float* a, const float* b, int64_t n, float* y);
// `pixels` runs of `channels`: float(double(x) * scale[c] + shift[c]).
void scale_shift(const float* x, int64_t pixels, int channels, const float* scale, const float* shift, float* y);

}  // namespace engine::cpu::int8

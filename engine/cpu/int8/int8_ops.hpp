#pragma once
// The int8 path's operations around the int8 products (int8_executable.hpp), on NHWC values: one
// build for every instruction set (compiled without -m flags and with -ffp-contract=off), so they
// give the same bits whichever int8 product runs. Each computes an element as the reference backend
// does (engine/reference), in the same order of operations.
#include <cstdint>

#include "formats/model.hpp"

namespace engine::cpu::int8 {

struct Hwc {
  int height = 1, width = 1, channels = 1;
};

// q + 128 for q = clamp(rne(x / scale), -127, 127) (a NaN to 127, as fmin/fmax do); scale 0: q = 0.
void quantize(const float* x, int64_t n, float scale, uint8_t* q);

// The quantized copy of an NHWC image with a border of q = 0 (128): [top + H + bottom][left + W + right][C],
// each row by `quantize` (one of the instruction sets' versions of the above).
void quantize_padded(const float* x, Hwc in, const formats::Window2D& win, float scale, uint8_t* out,
                     void (*quantize)(const float*, int64_t, float, uint8_t*));

// Rows [first, first + rows) of the im2col matrix of a padded quantized image: row (i, j) holds the
// window's taps in (p, q, c) order, then zeros up to kp.
void im2col(const uint8_t* padded, Hwc in, const formats::Window2D& win, int out_width, int first, int rows, int kp,
            uint8_t* out);

// y[i][o] = float(double(c[i][o] - offset[o]) * scale[o] + bias[o]), then max(y, 0) if relu.
void requantize_rows(const int32_t* c, int ldc, int rows, int n, const int32_t* offset, const double* scale,
                     const double* bias, bool relu, float* y);

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

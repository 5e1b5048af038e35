#pragma once
// The CPU reference kernels, one sample at a time (the executable runs samples in parallel). Every
// dot product and window sum is accumulated in double and rounded to float once, so the reference
// is as close to exact arithmetic as float storage allows; GPU backends are measured against it.
#include <cstdint>

#include "formats/model.hpp"

namespace engine::reference {

struct Dims3 {
  int channels = 1, height = 1, width = 1;
};

// (float(x) * scale - mean[c]) / std[c] in float32, border = pad_value (model-format-v1.md).
void preprocess_uint8(const uint8_t* raw, Dims3 raw_dims, const formats::Preprocess& p, float* out);

// weight [out.channels, in.channels, kh, kw]; bias may be null. `acc` is scratch for one output
// plane (out.height * out.width doubles).
void conv2d(const float* x, Dims3 in, const float* weight, const float* bias, const formats::Window2D& win,
            Dims3 out, float* y, double* acc);
void avgpool(const float* x, Dims3 in, const formats::Window2D& win, bool count_include_pad, Dims3 out, float* y);
void maxpool(const float* x, Dims3 in, const formats::Window2D& win, Dims3 out, float* y);

void relu(const float* x, int64_t n, float* y);
void tanh(const float* x, int64_t n, float* y);
void sigmoid(const float* x, int64_t n, float* y);

// weight [units, k] (PyTorch Linear layout); bias may be null.
void dense(const float* x, int64_t k, const float* weight, const float* bias, int units, float* y);
void softmax(const float* x, int64_t k, float* y);
void add(const float* a, const float* b, int64_t n, float* y);
// y[c, i] = x[c, i] * scale[c] + shift[c] for `channels` channels of `inner` elements each, in
// double, rounded to float once.
void scale_shift(const float* x, int64_t channels, int64_t inner, const float* scale, const float* shift, float* y);

}  // namespace engine::reference

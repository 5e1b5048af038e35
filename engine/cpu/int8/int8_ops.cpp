#include "engine/cpu/int8/int8_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace engine::cpu::int8 {

void quantize(const float* x, int64_t n, float scale, uint8_t* q) {
  if (scale == 0.0f) {
    std::memset(q, 128, size_t(n));
    return;
  }
  // Clamping first and rounding after gives the same integer (rounding is monotone and the bounds
  // are integers); adding and subtracting 1.5 * 2^23 rounds to nearest even in the default mode
  // without a library call.
  constexpr float kRound = 12582912.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = !(v < 127.0f) ? 127.0f : v;
    v = v > -127.0f ? v : -127.0f;
    const float r = (v + kRound) - kRound;
    q[i] = uint8_t(int(r) + 128);
  }
}

void quantize_padded(const float* x, Hwc in, const formats::Window2D& win, float scale, uint8_t* out,
                     void (*quantize)(const float*, int64_t, float, uint8_t*)) {
  const int wp = win.pad_left + in.width + win.pad_right, hp = win.pad_top + in.height + win.pad_bottom;
  const int64_t row = int64_t(wp) * in.channels;
  // The border in one pass (a few bytes a row: one call per row side would cost more), then the rows.
  if (wp != in.width || hp != in.height) std::memset(out, 128, size_t(row) * size_t(hp));
  for (int i = 0; i < in.height; ++i)
    quantize(x + int64_t(i) * in.width * in.channels, int64_t(in.width) * in.channels, scale,
             out + (int64_t(win.pad_top) + i) * row + int64_t(win.pad_left) * in.channels);
}

namespace {

// im2col's rows with window rows of at most Bytes bytes: one fixed-size copy each (a register's
// load and store, no library call), in order, so each overwrites the previous one's excess; the
// last one's excess is overwritten by the padding of k or by the next row (the buffers have
// kIm2colSlack bytes of slack). Bytes 0: copies of exactly the run.
template <int Bytes>
void im2col_rows(const uint8_t* padded, int64_t row_bytes, int64_t pixel_bytes, int64_t stride_bytes, int kernel_h,
                 int64_t run, int64_t k, int out_width, int first, int rows, int kp, uint8_t* out) {
  int i = first / out_width, j = first % out_width;
  for (int r = 0; r < rows; ++r) {
    uint8_t* o = out + int64_t(r) * kp;
    const uint8_t* src = padded + i * stride_bytes + j * pixel_bytes;
    for (int p = 0; p < kernel_h; ++p) std::memcpy(o + p * run, src + p * row_bytes, Bytes > 0 ? size_t(Bytes) : size_t(run));
    for (int64_t t = k; t < kp; ++t) o[t] = 128;  // at most 3 bytes
    if (++j == out_width) j = 0, ++i;
  }
}

}  // namespace

void im2col(const uint8_t* padded, Hwc in, const formats::Window2D& win, int out_width, int first, int rows, int kp,
            uint8_t* out) {
  const int64_t row_bytes = int64_t(win.pad_left + in.width + win.pad_right) * in.channels;
  const int64_t run = int64_t(win.kernel_w) * in.channels;  // one window row: kw taps of C channels
  const int64_t k = run * win.kernel_h;
  auto rows_with = [&](auto copy) {
    copy(padded, row_bytes, int64_t(win.stride_w) * in.channels, row_bytes * win.stride_h, win.kernel_h, run, k,
         out_width, first, rows, kp, out);
  };
  static_assert(kIm2colSlack >= 64);
  if (run <= 16) rows_with(im2col_rows<16>);
  else if (run <= 32) rows_with(im2col_rows<32>);
  else if (run <= 64) rows_with(im2col_rows<64>);
  else rows_with(im2col_rows<0>);
}

void requantize_rows(const int32_t* c, int ldc, int rows, int n, const int32_t* offset, const double* scale,
                     const double* bias, Act act, float* y) {
  for (int r = 0; r < rows; ++r) {
    const int32_t* cr = c + int64_t(r) * ldc;
    float* yr = y + int64_t(r) * n;
    for (int o = 0; o < n; ++o) yr[o] = float(double(cr[o] - offset[o]) * scale[o] + bias[o]);
    if (act == Act::Relu)
      for (int o = 0; o < n; ++o) yr[o] = yr[o] > 0.0f ? yr[o] : 0.0f;
    else if (act == Act::Tanh)
      for (int o = 0; o < n; ++o) yr[o] = rational_tanh(yr[o]);
  }
}

namespace {

struct Span {
  int64_t start, first, last;  // window origin, and its taps [first, last) inside the input
};
Span window(int out, int stride, int pad, int kernel, int size) {
  const int64_t start = int64_t(out) * stride - pad;
  return {start, std::max<int64_t>(0, -start), std::min<int64_t>(kernel, size - start)};
}

// Non-overlapping 2x2 windows inside the input (most models' pools): the general loops' order
// without their window bounds.
bool inner_2x2(const formats::Window2D& win, Hwc in, Hwc out) {
  return win.kernel_h == 2 && win.kernel_w == 2 && win.stride_h == 2 && win.stride_w == 2 && win.pad_top == 0 &&
         win.pad_left == 0 && 2 * out.height <= in.height && 2 * out.width <= in.width;
}

// y[i][j][k] = f(the window's four taps in (p, q) order) for each output of a non-overlapping 2x2 pool.
template <class F>
void each_2x2(const float* x, Hwc in, Hwc out, float* y, F f) {
  const int c = in.channels;
  const int64_t row = int64_t(in.width) * c, pair = 2 * int64_t(c);
  for (int i = 0; i < out.height; ++i) {
    const float* r0 = x + int64_t(2 * i) * row;
    const float* r1 = r0 + row;
    float* o = y + int64_t(i) * out.width * c;
    for (int j = 0; j < out.width; ++j)
      for (int k = 0; k < c; ++k) {
        const int64_t a = j * pair + k, b = a + c;
        o[j * c + k] = f(r0[a], r0[b], r1[a], r1[b]);
      }
  }
}

}  // namespace

void maxpool(const float* x, Hwc in, const formats::Window2D& win, Hwc out, float* y) {
  const int c = in.channels;
  if (inner_2x2(win, in, out)) {  // the same maxima in the same order: signed zeros and NaNs too
    each_2x2(x, in, out, y, [](float a, float b, float c2, float d) {
      const float m = std::max(-std::numeric_limits<float>::infinity(), a);
      return std::max(std::max(std::max(m, b), c2), d);
    });
    return;
  }
  for (int i = 0; i < out.height; ++i) {
    const Span rs = window(i, win.stride_h, win.pad_top, win.kernel_h, in.height);
    for (int j = 0; j < out.width; ++j) {
      const Span cs = window(j, win.stride_w, win.pad_left, win.kernel_w, in.width);
      float* m = y + (int64_t(i) * out.width + j) * c;
      std::fill(m, m + c, -std::numeric_limits<float>::infinity());
      for (int64_t p = rs.first; p < rs.last; ++p)
        for (int64_t q = cs.first; q < cs.last; ++q) {
          const float* v = x + ((rs.start + p) * in.width + cs.start + q) * c;
          for (int k = 0; k < c; ++k) m[k] = std::max(m[k], v[k]);
        }
    }
  }
}

void avgpool(const float* x, Hwc in, const formats::Window2D& win, bool count_include_pad, Hwc out, float* y,
             double* sum) {
  const int c = in.channels;
  if (inner_2x2(win, in, out)) {  // four taps inside: the divisor is 4 under either rule
    each_2x2(x, in, out, y, [](float a, float b, float c2, float d) {
      return float(((((0.0 + double(a)) + double(b)) + double(c2)) + double(d)) / 4.0);
    });
    return;
  }
  for (int i = 0; i < out.height; ++i) {
    const Span rs = window(i, win.stride_h, win.pad_top, win.kernel_h, in.height);
    for (int j = 0; j < out.width; ++j) {
      const Span cs = window(j, win.stride_w, win.pad_left, win.kernel_w, in.width);
      std::fill(sum, sum + c, 0.0);
      for (int64_t p = rs.first; p < rs.last; ++p)
        for (int64_t q = cs.first; q < cs.last; ++q) {
          const float* v = x + ((rs.start + p) * in.width + cs.start + q) * c;
          for (int k = 0; k < c; ++k) sum[k] += double(v[k]);
        }
      const int64_t inside = std::max<int64_t>(0, rs.last - rs.first) * std::max<int64_t>(0, cs.last - cs.first);
      const double divisor = count_include_pad ? double(win.kernel_h) * double(win.kernel_w) : double(inside);
      float* o = y + (int64_t(i) * out.width + j) * c;
      for (int k = 0; k < c; ++k) o[k] = divisor > 0 ? float(sum[k] / divisor) : 0.0f;
    }
  }
}

void relu(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void tanh(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = rational_tanh(x[i]);
}

void sigmoid(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(1.0 / (1.0 + std::exp(-double(x[i]))));
}

void softmax(const float* x, int64_t n, float* y) {
  if (n <= 0) return;
  const float m = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - double(m));
  for (int64_t i = 0; i < n; ++i) y[i] = float(std::exp(double(x[i]) - double(m)) / sum);
}

void add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void scale_shift(const float* x, int64_t pixels, int channels, const float* scale, const float* shift, float* y) {
  for (int64_t p = 0; p < pixels; ++p)
    for (int c = 0; c < channels; ++c) {
      const int64_t i = p * channels + c;
      y[i] = float(double(x[i]) * double(scale[c]) + double(shift[c]));
    }
}

}  // namespace engine::cpu::int8

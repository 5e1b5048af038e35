#include <algorithm>
#include <limits>

#include "engine/reference/ops.hpp"

namespace engine::reference {

void avgpool(const float* x, Dims3 in, const formats::Window2D& win, bool count_include_pad, Dims3 out,
             float* y) {
  const int kh = win.kernel_h, kw = win.kernel_w;
  for (int c = 0; c < out.channels; ++c) {
    const float* x_c = x + int64_t(c) * in.height * in.width;
    for (int i = 0; i < out.height; ++i) {
      // 64-bit: a window of up to 2^31 - 1 with padding just under it overflows int arithmetic.
      const int64_t top = int64_t(i) * win.stride_h - win.pad_top;
      const int64_t p0 = std::max<int64_t>(0, -top), p1 = std::min<int64_t>(kh, in.height - top);
      for (int j = 0; j < out.width; ++j) {
        const int64_t left = int64_t(j) * win.stride_w - win.pad_left;
        const int64_t q0 = std::max<int64_t>(0, -left), q1 = std::min<int64_t>(kw, in.width - left);
        double sum = 0.0;
        for (int64_t p = p0; p < p1; ++p)
          for (int64_t q = q0; q < q1; ++q) sum += double(x_c[int64_t(top + p) * in.width + left + q]);
        // Padded positions add zero to the sum; they only change the divisor.
        const int64_t inside = std::max<int64_t>(0, p1 - p0) * std::max<int64_t>(0, q1 - q0);
        const double divisor = count_include_pad ? double(kh) * double(kw) : double(inside);
        y[(int64_t(c) * out.height + i) * out.width + j] = divisor > 0 ? float(sum / divisor) : 0.0f;
      }
    }
  }
}

void maxpool(const float* x, Dims3 in, const formats::Window2D& win, Dims3 out, float* y) {
  const int kh = win.kernel_h, kw = win.kernel_w;
  for (int c = 0; c < out.channels; ++c) {
    const float* x_c = x + int64_t(c) * in.height * in.width;
    for (int i = 0; i < out.height; ++i) {
      // 64-bit: a window of up to 2^31 - 1 with padding just under it overflows int arithmetic.
      const int64_t top = int64_t(i) * win.stride_h - win.pad_top;
      const int64_t p0 = std::max<int64_t>(0, -top), p1 = std::min<int64_t>(kh, in.height - top);
      for (int j = 0; j < out.width; ++j) {
        const int64_t left = int64_t(j) * win.stride_w - win.pad_left;
        const int64_t q0 = std::max<int64_t>(0, -left), q1 = std::min<int64_t>(kw, in.width - left);
        // Padded positions behave as -inf: they are simply never visited.
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t p = p0; p < p1; ++p)
          for (int64_t q = q0; q < q1; ++q) m = std::max(m, x_c[int64_t(top + p) * in.width + left + q]);
        y[(int64_t(c) * out.height + i) * out.width + j] = m;
      }
    }
  }
}

}  // namespace engine::reference

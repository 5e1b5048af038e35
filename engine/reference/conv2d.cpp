#include <algorithm>

#include "engine/reference/ops.hpp"

namespace engine::reference {
namespace {

// Output positions o with 0 <= o * stride + offset < size, as [first, last).
struct Range {
  int first, last;
};
// In 64 bits: offset may be -(2^31 - 2) (padding just under a huge kernel), stride up to 2^31 - 1.
Range inside(int64_t offset, int64_t stride, int64_t size, int outputs) {
  const int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t span = size - 1 - offset;
  const int64_t last = span < 0 ? 0 : std::min<int64_t>(outputs, span / stride + 1);
  return {int(std::min(first, last)), int(last)};
}

}  // namespace

// Tap by tap over a whole output plane: every output element still sums bias, then its taps in
// (c, p, q) order, exactly as the formula reads, but the innermost loop runs along an output row,
// which the compiler vectorises. Padded taps are skipped: they would add exact zeros.
void conv2d(const float* x, Dims3 in, const float* weight, const float* bias, const formats::Window2D& win,
            Dims3 out, float* y, double* acc) {
  const int kh = win.kernel_h, kw = win.kernel_w, sh = win.stride_h, sw = win.stride_w;
  const int64_t plane = int64_t(out.height) * out.width;
  for (int o = 0; o < out.channels; ++o) {
    std::fill(acc, acc + plane, bias ? double(bias[o]) : 0.0);
    for (int c = 0; c < in.channels; ++c) {
      const float* x_c = x + int64_t(c) * in.height * in.width;
      for (int p = 0; p < kh; ++p) {
        const Range rows = inside(p - win.pad_top, sh, in.height, out.height);
        for (int q = 0; q < kw; ++q) {
          const double w = weight[((int64_t(o) * in.channels + c) * kh + p) * kw + q];
          const Range cols = inside(q - win.pad_left, sw, in.width, out.width);
          for (int i = rows.first; i < rows.last; ++i) {
            const float* x_row = x_c + (int64_t(i) * sh + p - win.pad_top) * in.width;
            double* a_row = acc + int64_t(i) * out.width;
            const int shift = q - win.pad_left;
            if (sw == 1) {  // the common case, with contiguous loads
              for (int j = cols.first; j < cols.last; ++j) a_row[j] += double(x_row[j + shift]) * w;
            } else {
              for (int j = cols.first; j < cols.last; ++j) a_row[j] += double(x_row[int64_t(j) * sw + shift]) * w;
            }
          }
        }
      }
    }
    float* y_o = y + o * plane;
    for (int64_t k = 0; k < plane; ++k) y_o[k] = float(acc[k]);
  }
}

}  // namespace engine::reference

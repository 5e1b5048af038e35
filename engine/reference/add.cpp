#include "engine/reference/ops.hpp"

namespace engine::reference {

// A float sum is already correctly rounded; going through double would round twice.
void add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// The product of two floats is exact in double, so this rounds twice at most (the double sum, then
// to float): as close to x * scale + shift as float storage allows.
void scale_shift(const float* x, int64_t channels, int64_t inner, const float* scale, const float* shift, float* y) {
  for (int64_t c = 0; c < channels; ++c) {
    const double s = scale[c], b = shift[c];
    for (int64_t i = 0; i < inner; ++i) y[c * inner + i] = float(double(x[c * inner + i]) * s + b);
  }
}

}  // namespace engine::reference

#include <algorithm>
#include <cmath>

#include "engine/reference/ops.hpp"

namespace engine::reference {

void softmax(const float* x, int64_t k, float* y) {
  if (k <= 0) return;
  // Subtracting the maximum keeps exp() from overflowing; in exact arithmetic it changes nothing.
  const float m = *std::max_element(x, x + k);
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) sum += std::exp(double(x[i]) - double(m));
  for (int64_t i = 0; i < k; ++i) y[i] = float(std::exp(double(x[i]) - double(m)) / sum);
}

}  // namespace engine::reference

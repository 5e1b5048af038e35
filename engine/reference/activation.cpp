#include <cmath>

#include "engine/reference/ops.hpp"

namespace engine::reference {

void relu(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// tanh and exp in double, then one rounding: the float result is (almost always) the correctly
// rounded one, which no float32 library promises.
void tanh(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(std::tanh(double(x[i])));
}

void sigmoid(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(1.0 / (1.0 + std::exp(-double(x[i]))));
}

}  // namespace engine::reference

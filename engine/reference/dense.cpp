#include "engine/reference/ops.hpp"

namespace engine::reference {

void dense(const float* x, int64_t k, const float* weight, const float* bias, int units, float* y) {
  for (int u = 0; u < units; ++u) {
    const float* w_u = weight + int64_t(u) * k;
    double acc = bias ? double(bias[u]) : 0.0;
    for (int64_t i = 0; i < k; ++i) acc += double(w_u[i]) * double(x[i]);
    y[u] = float(acc);
  }
}

}  // namespace engine::reference

#pragma once
// dense for training, fp32: one tiled GEMM kernel serves the forward pass, the input gradient and
// the weight gradient (they differ only in strides); each output element is one thread's sum over
// k in ascending order, host_ops.hpp's order, so results are bitwise reproducible.
#include <cuda_runtime_api.h>

namespace engine::custom::train {

// c[m, n] = (accumulate ? c[m, n] : bias ? bias[n] : 0) + sum over k ascending of A(m, k) * B(k, n),
// with A(m, k) = a[m * a_m + k * a_k] and B(k, n) = b[k * b_k + n * b_n]; c is row-major, ldc floats
// per row.
struct GemmArgs {
  const float* a = nullptr;
  long long a_m = 0, a_k = 0;
  const float* b = nullptr;
  long long b_k = 0, b_n = 0;
  const float* bias = nullptr;
  float* c = nullptr;
  long long ldc = 0;
  int m = 0, n = 0, k = 0;
  bool accumulate = false;
  // When set, one more column, n: B(k, n) = 1 and c's column n goes to row_sums[m] instead, so the
  // same launch also writes each row's plain sum over k (the dense bias gradient, sum over samples
  // of dy, in ascending order like every other column).
  float* row_sums = nullptr;
  // A folded activation (a Pointwise, >= 0): c = act(sum) in the epilogue (forward); or A's
  // elements read as activation_grad(a_act, a[...], a_act_y[same index]) (backward through it).
  int epilogue_act = -1;
  int a_act = -1;
  const float* a_act_y = nullptr;
};
void gemm(const GemmArgs& args, cudaStream_t stream);


}  // namespace engine::custom::train

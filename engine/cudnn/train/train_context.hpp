#pragma once
// What every cudnn training op sees when it enqueues work: the trainer's handles (bound to its
// stream), the one convolution workspace sized at plan time for max_batch, and a device vector of
// ones (the GEMV operand that turns a bias gradient into a fixed-order cuBLAS sum).
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>

namespace engine::cudnn::train {

struct TrainContext {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  const float* ones = nullptr;  // at least max(max_batch, largest conv output plane) floats of 1.0f
};

// cuDNN's alpha/beta: beta = 1 adds to what the output holds (another consumer of the value wrote
// its gradient there first), beta = 0 overwrites without reading it (cuDNN and cuBLAS do not read
// an output whose beta is zero, so a poisoned buffer stays harmless).
inline const float* kOne() {
  static const float one = 1.0f;
  return &one;
}
inline const float* kZero() {
  static const float zero = 0.0f;
  return &zero;
}
inline const float* beta_for(bool accumulate) { return accumulate ? kOne() : kZero(); }

}  // namespace engine::cudnn::train

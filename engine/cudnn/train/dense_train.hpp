#pragma once
// dense for training through cuBLAS SGEMM (row-major tensors seen as column-major matrices):
//   forward  y[n, U] = x[n, K] W[U, K]^T + b   (Sgemm T,N then cudnnAddTensor for the bias)
//   dX[n, K] (+)= dY[n, U] W[U, K]             (Sgemm N,N; beta 1 adds to another consumer's gradient)
//   dW[U, K] = dY^T X                           (Sgemm N,T over the batch)
//   db[U] = dY^T 1                              (Sgemv against a vector of ones)
// The trainer's cuBLAS handle has CUBLAS_DEFAULT_MATH (no TF32 for fp32), atomics not allowed, a
// fixed workspace: the same configuration picks the same kernel and gives the same bits.
#include <cublas_v2.h>

#include <string>

#include "engine/cudnn/descriptors.hpp"
#include "engine/cudnn/train/train_context.hpp"

namespace engine::cudnn::train {

class DenseTrain {
 public:
  DenseTrain(int inputs, int units, const std::string& label);
  void set_batch(int n);
  void forward(const TrainContext& ctx, const float* x, const float* w, const float* b, float* y) const;
  void backward(const TrainContext& ctx, const float* x, const float* dy, const float* w, float* dw, float* db,
                float* dx, bool accumulate) const;
  std::string summary() const;

 private:
  std::string label_;
  int k_ = 0, u_ = 0, n_ = 0;
  TensorDesc y_desc_, bias_desc_;
};

}  // namespace engine::cudnn::train

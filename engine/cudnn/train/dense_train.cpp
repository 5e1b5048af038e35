#include "engine/cudnn/train/dense_train.hpp"

#include <fmt/format.h>

namespace engine::cudnn::train {

DenseTrain::DenseTrain(int inputs, int units, const std::string& label) : label_(label), k_(inputs), u_(units) {
  set_nchw(bias_desc_, 1, u_, 1, 1, label_);
  set_batch(1);
}

void DenseTrain::set_batch(int n) {
  n_ = n;
  set_nchw(y_desc_, n, u_, 1, 1, label_);
}

void DenseTrain::forward(const TrainContext& ctx, const float* x, const float* w, const float* b, float* y) const {
  // Column-major: W is K x U (ld K), x is K x n (ld K), y is U x n (ld U): y = W^T x.
  CUBLAS_CHECK_CTX(cublasSgemm(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, u_, n_, k_, kOne(), w, k_, x, k_, kZero(), y, u_),
                   label_);
  if (b) CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, kOne(), bias_desc_, b, kOne(), y_desc_, y), label_);
}

void DenseTrain::backward(const TrainContext& ctx, const float* x, const float* dy, const float* w, float* dw,
                          float* db, float* dx, bool accumulate) const {
  // dW (K x U, ld K) = x (K x n) dy^T (n x U).
  CUBLAS_CHECK_CTX(cublasSgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, k_, u_, n_, kOne(), x, k_, dy, u_, kZero(), dw, k_),
                   label_);
  // db (U) = dy (U x n, ld U) times ones(n).
  if (db)
    CUBLAS_CHECK_CTX(cublasSgemv(ctx.cublas, CUBLAS_OP_N, u_, n_, kOne(), dy, u_, ctx.ones, 1, kZero(), db, 1), label_);
  // dx (K x n, ld K) (+)= W (K x U) dy (U x n).
  if (dx)
    CUBLAS_CHECK_CTX(cublasSgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, k_, n_, u_, kOne(), w, k_, dy, u_,
                                 beta_for(accumulate), dx, k_),
                     label_);
}

std::string DenseTrain::summary() const {
  return fmt::format("{}: cublasSgemm forward, dX, dW; cublasSgemv bias gradient ({} -> {})", label_, k_, u_);
}

}  // namespace engine::cudnn::train

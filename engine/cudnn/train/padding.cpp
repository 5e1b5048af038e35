#include "engine/cudnn/train/padding.hpp"

#include <fmt/format.h>

namespace engine::cudnn::train {

Padding::Padding(cudnnHandle_t handle, int c, int h, int w, int pt, int pb, int pl, int pr, int max_batch,
                 float border, bool with_gradient, const std::string& label)
    : label_(label), c_(c), h_(h), w_(w), pt_(pt), pb_(pb), pl_(pl), pr_(pr) {
  const size_t elements = size_t(max_batch) * size_t(c) * size_t(padded_height()) * size_t(padded_width());
  padded_ = gpu::DeviceBuffer<float>(elements, "padded input of " + label);
  if (with_gradient) dpadded_ = gpu::DeviceBuffer<float>(elements, "padded input gradient of " + label);
  // The border, once: the whole buffer set to `border` (cudnnSetTensor takes any float, -inf included;
  // cudaMemset only bytes). Synchronous with the handle's stream: the trainer synchronises after planning.
  TensorDesc all;
  set_nchw(all, max_batch, c, padded_height(), padded_width(), label);
  CUDNN_CHECK_CTX(cudnnSetTensor(handle, all, padded_.data(), &border), label);
  set_batch(max_batch);
}

void Padding::set_batch(int n) {
  set_nchw(packed_, n, c_, h_, w_, label_);
  const int ph = padded_height(), pw = padded_width();
  CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptorEx(interior_, CUDNN_DATA_FLOAT, n, c_, h_, w_, c_ * ph * pw, ph * pw, pw, 1),
                  label_);
}

void Padding::pad(const TrainContext& ctx, const float* x) const {
  float* interior = padded_.data() + size_t(pt_) * size_t(padded_width()) + size_t(pl_);
  CUDNN_CHECK_CTX(cudnnTransformTensor(ctx.cudnn, kOne(), packed_, x, kZero(), interior_, interior), label_);
}

void Padding::crop(const TrainContext& ctx, float* dx, bool accumulate) const {
  const float* interior = dpadded_.data() + size_t(pt_) * size_t(padded_width()) + size_t(pl_);
  CUDNN_CHECK_CTX(cudnnTransformTensor(ctx.cudnn, kOne(), interior_, interior, beta_for(accumulate), packed_, dx),
                  label_);
}

}  // namespace engine::cudnn::train

#include "engine/cudnn/train/pool_train.hpp"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>

namespace engine::cudnn::train {

PoolTrain::PoolTrain(cudnnHandle_t handle, const PoolShape& s, bool needs_dx, int max_batch, const std::string& label)
    : label_(label), shape_(s) {
  const bool symmetric = s.pt == s.pb && s.pl == s.pr;
  if (!symmetric && !s.max && !s.count_include_pad)
    throw std::runtime_error(label + ": avgpool with count_include_pad = false and asymmetric padding: cuDNN's pooling "
                                     "descriptor only takes symmetric padding, and padding explicitly would count the "
                                     "padded zeros in the divisor");
  in_h_ = s.h, in_w_ = s.w;
  int pad_h = s.pt, pad_w = s.pl;
  if (!symmetric) {
    const float border = s.max ? -std::numeric_limits<float>::infinity() : 0.0f;
    pad_.emplace(handle, s.c, s.h, s.w, s.pt, s.pb, s.pl, s.pr, max_batch, border, needs_dx, label);
    in_h_ = pad_->padded_height();
    in_w_ = pad_->padded_width();
    pad_h = pad_w = 0;
  }
  const cudnnPoolingMode_t mode = s.max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : s.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                        : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  CUDNN_CHECK_CTX(cudnnSetPooling2dDescriptor(pool_desc_, mode, CUDNN_PROPAGATE_NAN, s.kh, s.kw, pad_h, pad_w, s.sh,
                                              s.sw),
                  label_);
  set_batch(max_batch);
  int n = 0, c = 0, oh = 0, ow = 0;
  CUDNN_CHECK_CTX(cudnnGetPooling2dForwardOutputDim(pool_desc_, x_desc_, &n, &c, &oh, &ow), label_);
  if (c != s.c || oh != s.oh || ow != s.ow)
    throw std::runtime_error(fmt::format("{}: cuDNN computes an output of [{}, {}, {}] where the model has [{}, {}, {}]",
                                         label_, c, oh, ow, s.c, s.oh, s.ow));
}

void PoolTrain::set_batch(int n) {
  set_nchw(x_desc_, n, shape_.c, in_h_, in_w_, label_);
  set_nchw(y_desc_, n, shape_.c, shape_.oh, shape_.ow, label_);
  if (pad_) pad_->set_batch(n);
}

void PoolTrain::forward(const TrainContext& ctx, const float* x, float* y) const {
  if (pad_) {
    pad_->pad(ctx, x);
    x = pad_->padded();
  }
  CUDNN_CHECK_CTX(cudnnPoolingForward(ctx.cudnn, pool_desc_, kOne(), x_desc_, x, kZero(), y_desc_, y), label_);
}

void PoolTrain::backward(const TrainContext& ctx, const float* x, const float* y, const float* dy, float* dx,
                         bool accumulate) const {
  if (pad_) {
    CUDNN_CHECK_CTX(cudnnPoolingBackward(ctx.cudnn, pool_desc_, kOne(), y_desc_, y, y_desc_, dy, x_desc_,
                                         pad_->padded(), kZero(), x_desc_, pad_->padded_gradient()),
                    label_);
    pad_->crop(ctx, dx, accumulate);
    return;
  }
  CUDNN_CHECK_CTX(cudnnPoolingBackward(ctx.cudnn, pool_desc_, kOne(), y_desc_, y, y_desc_, dy, x_desc_, x,
                                       beta_for(accumulate), x_desc_, dx),
                  label_);
}

std::string PoolTrain::summary() const {
  return fmt::format("{}: cudnnPoolingForward/Backward {}{}", label_,
                     shape_.max                ? "CUDNN_POOLING_MAX_DETERMINISTIC"
                     : shape_.count_include_pad ? "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING"
                                                : "CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING",
                     pad_ ? ", asymmetric padding applied explicitly" : "");
}

}  // namespace engine::cudnn::train

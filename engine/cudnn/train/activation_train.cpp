#include "engine/cudnn/train/activation_train.hpp"

#include <climits>
#include <stdexcept>

namespace engine::cudnn::train {

ActivationTrain::ActivationTrain(cudnnActivationMode_t mode, bool softmax, long long elements, const std::string& label)
    : label_(label), softmax_(softmax) {
  if (elements > INT_MAX) throw std::runtime_error(label + ": more than 2^31 elements per sample");
  elements_ = int(elements);
  CUDNN_CHECK_CTX(cudnnSetActivationDescriptor(act_desc_, mode, CUDNN_PROPAGATE_NAN, 0.0), label_);
  set_batch(1);
}

void ActivationTrain::set_batch(int n) { set_nchw(desc_, n, elements_, 1, 1, label_); }

void ActivationTrain::forward(const TrainContext& ctx, const float* x, float* y) const {
  if (softmax_)
    CUDNN_CHECK_CTX(cudnnSoftmaxForward(ctx.cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, kOne(), desc_, x,
                                        kZero(), desc_, y),
                    label_);
  else
    CUDNN_CHECK_CTX(cudnnActivationForward(ctx.cudnn, act_desc_, kOne(), desc_, x, kZero(), desc_, y), label_);
}

void ActivationTrain::backward(const TrainContext& ctx, const float* x, const float* y, const float* dy, float* dx,
                               bool accumulate) const {
  if (softmax_)
    CUDNN_CHECK_CTX(cudnnSoftmaxBackward(ctx.cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, kOne(), desc_,
                                         y, desc_, dy, beta_for(accumulate), desc_, dx),
                    label_);
  else
    CUDNN_CHECK_CTX(cudnnActivationBackward(ctx.cudnn, act_desc_, kOne(), desc_, y, desc_, dy, desc_, x,
                                            beta_for(accumulate), desc_, dx),
                    label_);
}

}  // namespace engine::cudnn::train

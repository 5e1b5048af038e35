#pragma once
// relu / tanh / sigmoid (cudnnActivationForward/Backward) and a softmax that is not the loss's
// (cudnnSoftmaxForward/Backward, ACCURATE: the maximum subtracted first, per sample), on [n, count]
// viewed as [n, count, 1, 1]. Backward passes take beta = 1 to add to a gradient another consumer
// wrote first. cuDNN's derivatives are PyTorch's: relu' = (x > 0), tanh' = 1 - y^2, sigmoid' = y (1 - y).
#include <cudnn.h>

#include <string>

#include "engine/cudnn/descriptors.hpp"
#include "engine/cudnn/train/train_context.hpp"

namespace engine::cudnn::train {

class ActivationTrain {
 public:
  // mode: CUDNN_ACTIVATION_RELU / TANH / SIGMOID; or softmax = true.
  ActivationTrain(cudnnActivationMode_t mode, bool softmax, long long elements, const std::string& label);
  void set_batch(int n);
  void forward(const TrainContext& ctx, const float* x, float* y) const;
  void backward(const TrainContext& ctx, const float* x, const float* y, const float* dy, float* dx,
                bool accumulate) const;

 private:
  std::string label_;
  bool softmax_ = false;
  int elements_ = 0;
  ActivationDesc act_desc_;
  TensorDesc desc_;
};

}  // namespace engine::cudnn::train

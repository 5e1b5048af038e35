#pragma once
// maxpool and avgpool for training: cudnnPoolingForward / cudnnPoolingBackward.
//
// Max pooling uses CUDNN_POOLING_MAX_DETERMINISTIC: plain CUDNN_POOLING_MAX's backward pass may
// scatter overlapping windows' gradients in any order. Ties: the host trainers send a window's
// gradient to its FIRST maximum; cuDNN does not document which of several equal maxima receives it.
// The models here only tie on exact zeros after a relu (whose own gradient is 0 there, so the
// parameters' gradients do not depend on the choice) or on padded -inf, which never wins.
// Average pooling: CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING / EXCLUDE_PADDING, the model's
// count_include_pad. Asymmetric padding: Padding (padding.hpp), a -inf border for max, 0 for average;
// average pooling that excludes the padding from its divisor with asymmetric padding is refused,
// as by the inference backend (unsupported_reason in pool.cpp).
#include <cudnn.h>

#include <optional>
#include <string>

#include "engine/cudnn/descriptors.hpp"
#include "engine/cudnn/train/padding.hpp"
#include "engine/cudnn/train/train_context.hpp"

namespace engine::cudnn::train {

struct PoolShape {
  int c = 1, h = 1, w = 1;  // input per sample
  int oh = 1, ow = 1;       // output per sample (c channels)
  int kh = 1, kw = 1, sh = 1, sw = 1;
  int pt = 0, pb = 0, pl = 0, pr = 0;
  bool max = true;
  bool count_include_pad = true;
};

class PoolTrain {
 public:
  PoolTrain(cudnnHandle_t handle, const PoolShape& shape, bool needs_dx, int max_batch, const std::string& label);
  void set_batch(int n);
  void forward(const TrainContext& ctx, const float* x, float* y) const;
  // dx (+)= the input gradient; x and y as the forward pass saw and wrote them.
  void backward(const TrainContext& ctx, const float* x, const float* y, const float* dy, float* dx,
                bool accumulate) const;
  std::string summary() const;

 private:
  std::string label_;
  PoolShape shape_;
  int in_h_ = 0, in_w_ = 0;
  std::optional<Padding> pad_;
  PoolingDesc pool_desc_;
  TensorDesc x_desc_, y_desc_;
};

}  // namespace engine::cudnn::train

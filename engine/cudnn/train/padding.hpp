#pragma once
// Asymmetric padding for the training ops, all in cuDNN: cuDNN's convolution and pooling
// descriptors take one padding per dimension, applied on both sides, so a node with pad_top !=
// pad_bottom (or left != right) runs on a padded copy with padding 0, as the inference steps do.
// The copy's border is written once at plan time (0 for conv2d and avgpool, -inf for maxpool, so a
// padded position never wins) and never touched again; each forward pass writes the interior with
// cudnnTransformTensor through a strided view. The backward pass writes the padded input's
// gradient into a scratch of the same shape and crops its interior into dx (beta: overwrite or add).
#include <cudnn.h>

#include <string>

#include "engine/cudnn/descriptors.hpp"
#include "engine/cudnn/train/train_context.hpp"
#include "engine/gpu/buffers.hpp"

namespace engine::cudnn::train {

class Padding {
 public:
  Padding(cudnnHandle_t handle, int c, int h, int w, int pt, int pb, int pl, int pr, int max_batch, float border,
          bool with_gradient, const std::string& label);
  int padded_height() const { return h_ + pt_ + pb_; }
  int padded_width() const { return w_ + pl_ + pr_; }
  float* padded() const { return padded_.data(); }
  float* padded_gradient() const { return dpadded_.data(); }
  void set_batch(int n);
  // padded interior = x
  void pad(const TrainContext& ctx, const float* x) const;
  // dx (+)= interior of padded_gradient()
  void crop(const TrainContext& ctx, float* dx, bool accumulate) const;

 private:
  std::string label_;
  int c_, h_, w_, pt_, pb_, pl_, pr_;
  gpu::DeviceBuffer<float> padded_, dpadded_;
  TensorDesc packed_, interior_;
};

}  // namespace engine::cudnn::train

#pragma once
// conv2d for training through cuDNN: cudnnConvolutionForward + cudnnAddTensor (bias),
// cudnnConvolutionBackwardData (dx), cudnnConvolutionBackwardFilter (dw), and the bias gradient as
// two cuBLAS GEMVs against a vector of ones (per (sample, channel) plane sums, then over samples
// in sample order): a fixed-order sum with atomics off, where cudnnConvolutionBackwardBias
// documents no determinism guarantee.
//
// Algorithms, chosen once at plan time for this shape: cuDNN's heuristic ranking
// (cudnnGet*Algorithm_v7), first entry that is supported, DETERMINISTIC, not FFT/Winograd (their
// transforms round differently from a dot product: conv.cpp's fp32 rule), and whose workspace
// query succeeds for every batch size 1..max_batch; CUDNN_FMA_MATH on the descriptor (never TF32
// tensor cores for fp32). Backward filter: ALGO_0 and ALGO_3 are non-deterministic (atomics), so
// the filter normally lands on ALGO_1. One workspace (the largest need of the three, over every n)
// is allocated by the trainer.
#include <cudnn.h>

#include <optional>
#include <string>

#include "engine/cudnn/descriptors.hpp"
#include "engine/cudnn/train/padding.hpp"
#include "engine/cudnn/train/train_context.hpp"
#include "engine/gpu/buffers.hpp"

namespace engine::cudnn::train {

struct ConvShape {
  int c = 1, h = 1, w = 1;     // input per sample
  int k = 1, oh = 1, ow = 1;   // output per sample
  int kh = 1, kw = 1, sh = 1, sw = 1;
  int pt = 0, pb = 0, pl = 0, pr = 0;
};

class ConvTrain {
 public:
  // needs_dx: whether the input's gradient is ever asked for (the padded gradient scratch).
  ConvTrain(cudnnHandle_t handle, const ConvShape& shape, bool has_bias, bool needs_dx, int max_batch,
            const std::string& label);
  size_t workspace_bytes() const { return workspace_; }
  // Floats of ones the bias gradient's GEMVs read.
  int ones_needed() const { return shape_.oh * shape_.ow; }
  // Host only: re-describes every tensor for n samples and checks that the workspace suffices.
  void set_batch(int n);
  void forward(const TrainContext& ctx, const float* x, const float* w, const float* b, float* y) const;
  // dw, db overwritten (db may be null); dx (+)= the input gradient when not null.
  void backward(const TrainContext& ctx, const float* x, const float* dy, const float* w, float* dw, float* db,
                float* dx, bool accumulate) const;
  std::string summary() const;

 private:
  size_t workspace_for(int n);
  void choose_algorithms(cudnnHandle_t handle);

  std::string label_;
  ConvShape shape_;
  int max_batch_ = 1, n_ = 0;
  int in_h_ = 0, in_w_ = 0;  // what cuDNN sees: padded when the padding is asymmetric
  bool has_bias_ = false;
  cudnnHandle_t handle_ = nullptr;
  std::optional<Padding> pad_;
  TensorDesc x_desc_, y_desc_, bias_desc_;
  FilterDesc w_desc_;
  ConvDesc conv_desc_;
  cudnnConvolutionFwdAlgo_t fwd_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t workspace_ = 0;
  gpu::DeviceBuffer<float> plane_sums_;  // bias gradient: [max_batch, k] per-plane sums
};

}  // namespace engine::cudnn::train

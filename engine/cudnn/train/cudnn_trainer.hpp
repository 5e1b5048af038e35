#pragma once
// The cudnn backend's TrainExecutable: host_trainer.hpp's plan and order on the GPU, fp32, every
// weighted or windowed op through cuDNN and cuBLAS:
//   conv2d      cudnnConvolutionForward/BackwardData/BackwardFilter, cuBLAS GEMV bias gradient (conv_train.hpp)
//   dense       cuBLAS SGEMM forward, dX, dW; GEMV bias gradient (dense_train.hpp)
//   max/avgpool cudnnPoolingForward/Backward (pool_train.hpp)
//   relu/tanh/sigmoid, softmax inside the graph: cudnnActivation*/cudnnSoftmax* (activation_train.hpp)
//   add, concat, scale_shift: the GPU trainers' shared kernels (engine/gpu/train/pointwise_train.hpp): no library call
//     does them more simply, and they are element-wise (no sum whose order could differ)
// What is not per-op comes from DeviceTrainer (engine/gpu/train/device_trainer.hpp), shared with
// the custom backend's trainer: buffers, upload, uint8 preprocessing, the fused softmax + cross-entropy
// kernel, the optimiser kernel with device scalars, CUDA-graph capture per batch size.
//
// Deterministic: every convolution algorithm is one cuDNN reports deterministic (never FFT/Winograd,
// never TF32: CUDNN_FMA_MATH), max pooling is CUDNN_POOLING_MAX_DETERMINISTIC, cuBLAS runs with
// CUBLAS_DEFAULT_MATH, atomics not allowed and a fixed workspace set with cublasSetWorkspace (so
// neither the algorithm choice nor graph capture allocates). The same inputs give the same bits
// run after run on one GPU; the bits differ from the custom and cpu trainers' (other summation orders).
#include <cublas_v2.h>
#include <cudnn.h>

#include <memory>
#include <optional>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/train.hpp"
#include "engine/cudnn/descriptors.hpp"
#include "engine/cudnn/train/activation_train.hpp"
#include "engine/cudnn/train/conv_train.hpp"
#include "engine/cudnn/train/dense_train.hpp"
#include "engine/cudnn/train/pool_train.hpp"
#include "engine/cudnn/train/train_context.hpp"
#include "engine/gpu/train/device_trainer.hpp"

namespace engine::cudnn::train {

class CudnnTrainer final : public gpu::train::DeviceTrainer {
 public:
  CudnnTrainer(const Graph& graph, const TrainOptions& options);
  ~CudnnTrainer() override;

 private:
  struct Step {
    OpType op = OpType::Relu;
    std::vector<int> inputs;
    int output = -1;
    int64_t elements = 0;  // input elements per sample (scale_shift: per channel)
    int64_t channels = 0;  // scale_shift
    int weight = -1, bias = -1;  // indices into parameters_
    std::unique_ptr<ConvTrain> conv;
    std::unique_ptr<PoolTrain> pool;
    std::unique_ptr<DenseTrain> dense;
    std::unique_ptr<ActivationTrain> activation;  // relu/tanh/sigmoid/softmax (not the loss's softmax)
  };

  void prepare(int n) override;
  void enqueue_forward(int n) override;
  void enqueue_backward(int n, bool dry_run) override;

  // Declared before the steps, which keep the handle: destroyed after them.
  CudnnHandle cudnn_;
  CublasHandle cublas_;
  gpu::DeviceBuffer<unsigned char> workspace_, cublas_workspace_;
  gpu::DeviceBuffer<float> ones_;
  TrainContext ctx_;
  std::vector<Step> steps_;
  int prepared_ = 0;  // the batch size the library descriptors describe
};

std::unique_ptr<TrainExecutable> make_cudnn_trainer(const Graph& graph, const TrainOptions& options);

}  // namespace engine::cudnn::train

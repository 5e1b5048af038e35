#pragma once
// The custom backend's TrainExecutable: host_trainer.hpp's plan and order on the GPU, fp32
// throughout, with this backend's own kernels. Buffers, the step flow and graph capture are
// DeviceTrainer's (device_trainer.hpp, shared with the cudnn backend); step() allocates nothing.
//
// A step's device work (preprocessing, forward, fused softmax + cross-entropy, backward, update,
// the loss sum) is captured into a CUDA graph the first time a batch size is seen and replayed
// afterwards. The per-step scalars (scheduled lr, Adam's bias corrections) go through a small
// device block copied before each launch, never through kernel arguments, so the graph stays valid.
// Deterministic: every output element is one thread's fixed-order sum (or one block's fixed tree),
// no atomics; the same inputs give the same bits run after run.
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/train.hpp"
#include "engine/gpu/train/device_trainer.hpp"
#include "engine/gpu/train/train_launch.hpp"
#include "engine/gpu/buffers.hpp"

namespace engine::custom::train {

// The GPU trainers' shared part (engine/gpu/train).
using gpu::train::DeviceTrainer;
using gpu::train::WindowGeom;

class GpuTrainer final : public DeviceTrainer {
 public:
  // fold_activations: a relu/tanh/sigmoid that is the only reader of a conv2d or dense output runs
  // inside that node's kernels (forward epilogue, backward operand loads): fewer launches, the same
  // bits (tests compare both).
  GpuTrainer(const Graph& graph, const TrainOptions& options, bool fold_activations = true);
  ~GpuTrainer() override;

 private:
  struct Step {
    OpType op = OpType::Relu;
    std::vector<int> inputs;
    int output = -1;
    WindowGeom geom;
    int64_t elements = 0;  // input elements per sample (scale_shift: per channel)
    int64_t channels = 0;  // scale_shift
    int units = 0;
    int weight = -1, bias = -1;  // indices into parameters_
    gpu::DeviceBuffer<int> argmax;  // maxpool: [max_batch, output elements]
    gpu::DeviceBuffer<float> param_partials;  // conv2d: the weight gradient's per-chunk sums
    // Folding: on a conv2d/dense, the activation run in its kernels (a Pointwise, or -1) and that
    // activation's output value (the node then writes it, not its own output); on the activation,
    // `folded` (it runs nothing).
    int act = -1;
    int act_value = -1;
    bool folded = false;
  };

  void enqueue_forward(int n) override;
  void enqueue_backward(int n, bool dry_run) override;
  void poison_more(cudaStream_t stream) override;

  std::vector<Step> steps_;
};

std::unique_ptr<TrainExecutable> make_gpu_trainer(const Graph& graph, const TrainOptions& options);

}  // namespace engine::custom::train

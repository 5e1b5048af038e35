#pragma once
// The custom backend's TrainExecutable: host_trainer.hpp's plan and order on the GPU, fp32
// throughout, every buffer allocated here (parameters, gradients, optimiser state, activations and
// their gradients for max_batch, device and pinned staging); step() allocates nothing.
//
// A step's device work (preprocessing, forward, fused softmax + cross-entropy, backward, update,
// the loss sum) is captured into a CUDA graph the first time a batch size is seen and replayed
// afterwards. The per-step scalars (scheduled lr, Adam's bias corrections) go through a small
// device block copied before each launch, never through kernel arguments, so the graph stays valid.
// Deterministic: every output element is one thread's fixed-order sum (or one block's fixed tree),
// no atomics; the same inputs give the same bits run after run.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/train.hpp"
#include "engine/custom/train/loss_train.hpp"
#include "engine/custom/train/optimizer_train.hpp"
#include "engine/custom/train/train_launch.hpp"
#include "engine/gpu/buffers.hpp"

namespace engine::custom::train {

class GpuTrainer final : public TrainExecutable {
 public:
  // fold_activations: a relu/tanh/sigmoid that is the only reader of a conv2d or dense output runs
  // inside that node's kernels (forward epilogue, backward operand loads): fewer launches, the same
  // bits (tests compare both).
  GpuTrainer(const Graph& graph, const TrainOptions& options, bool fold_activations = true);
  ~GpuTrainer() override;
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  int max_batch() const override { return max_batch_; }
  int64_t steps_taken() const override { return t_; }
  std::string plan_summary() const override { return summary_; }
  BatchResult step(const void* input, const uint8_t* labels, int n) override;
  BatchResult evaluate(const void* input, const uint8_t* labels, int n) override;
  void read_parameters(std::span<float> out) const override;
  void write_parameters(std::span<const float> in) override;

  // Beyond the interface (tests, benchmarks):
  // A step on n samples already in this GPU's memory (raw input as step() takes it, labels as
  // bytes). The labels are NOT checked (they are on the device): the caller checks them once.
  BatchResult step_device(const void* device_input, const uint8_t* device_labels, int n);
  // Forward, loss and backward without the update (the step count stays); then read_gradients.
  BatchResult compute_gradients(const void* input, const uint8_t* labels, int n);
  void read_gradients(std::span<float> out) const;
  // CUDA-graph replay on (the default) or off: plain launches, for tests that compare the two.
  void use_graphs(bool on) { graphs_on_ = on; }
  cudaStream_t stream() const { return stream_.get(); }
  // Fills every activation and gradient buffer with NaN (all bits set), so a test sees any read of
  // something no kernel of the step wrote.
  void poison_buffers();

 private:
  enum class Mode { Train, Evaluate, Gradients };
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

  int root(int v) const;
  float* act(int v) const;
  float* grad(int v) const;  // null where the value has no gradient buffer
  float* param(int index) const;
  float* pgrad(int index) const;
  void check_batch(const void* input, const uint8_t* labels, int n) const;
  void check_labels(const uint8_t* labels, int n) const;
  void upload(const void* input, const uint8_t* labels, int n, cudaMemcpyKind kind);
  BatchResult finish(int n, Mode mode);
  void enqueue(int n, Mode mode);
  void enqueue_forward(int n);
  void enqueue_backward(int n, bool dry_run);
  void enqueue_update();
  cudaGraphExec_t graph_for(int n, Mode mode);

  Graph graph_;
  OptimizerOptions opt_;
  int max_batch_ = 0;
  int64_t t_ = 0;
  gpu::Stream stream_;
  gpu::DeviceBuffer<float> params_, grads_, state1_, state2_;
  std::vector<gpu::DeviceBuffer<float>> act_, grad_;  // per value; empty for aliases, unneeded gradients
  std::vector<bool> needs_;
  std::vector<Step> steps_;
  std::vector<int> zero_roots_;  // gradient buffers read before any kernel writes them: zeroed first
  std::vector<std::pair<int64_t, int64_t>> active_;  // [offset, end) of parameters the optimiser updates
  int logits_ = -1, loss_node_ = -1, prob_ = -1;
  int classes_ = 0;
  size_t sample_bytes_ = 0;
  bool uint8_input_ = false;
  gpu::DeviceBuffer<uint8_t> raw_, labels_;
  gpu::DeviceBuffer<float> mean_, std_, losses_;
  gpu::DeviceBuffer<LossResult> result_;
  gpu::DeviceBuffer<StepScalars> scalars_;
  gpu::PinnedBuffer<uint8_t> raw_staging_, labels_staging_;
  gpu::PinnedBuffer<LossResult> result_host_;
  gpu::PinnedBuffer<StepScalars> scalars_host_;
  bool graphs_on_ = true;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;  // (n, mode) -> instantiated graph
  std::string summary_;
  // The device current at construction: every entry point runs with it current (gpu::DeviceGuard),
  // and this last member, destroyed first, makes it current before the buffers are freed.
  struct DeviceOnDestruction {
    int device = 0;
    ~DeviceOnDestruction() { cudaSetDevice(device); }
  } device_;
};

std::unique_ptr<TrainExecutable> make_gpu_trainer(const Graph& graph, const TrainOptions& options);

}  // namespace engine::custom::train

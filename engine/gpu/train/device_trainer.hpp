#pragma once
// The backend-neutral part of a GPU TrainExecutable, shared by the custom backend's GpuTrainer
// (its own kernels) and the cudnn backend's CudnnTrainer (cuDNN + cuBLAS): every buffer (parameters,
// gradients, optimiser state, activations and the gradients the loss needs, for max_batch; device
// and pinned staging), the step / evaluate / compute_gradients flow, uint8 preprocessing on the
// device, the fused softmax + cross-entropy kernel (loss_train.hpp), the optimiser kernel
// (optimizer_train.hpp) with its per-step scalars in device memory, and CUDA-graph capture per
// (batch size, mode) with replay afterwards. A derived class plans its ops and enqueues the forward
// and backward passes; the order of gradient writes (first writer overwrites, later writers add,
// buffers read before any write are zeroed first) is kept here, in GradientWrites.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/train.hpp"
#include "engine/gpu/train/loss_train.hpp"
#include "engine/gpu/train/optimizer_train.hpp"
#include "engine/gpu/buffers.hpp"

namespace engine::gpu::train {

class DeviceTrainer : public TrainExecutable {
 public:
  ~DeviceTrainer() override;
  DeviceTrainer(const DeviceTrainer&) = delete;
  DeviceTrainer& operator=(const DeviceTrainer&) = delete;

  int max_batch() const override { return max_batch_; }
  int64_t steps_taken() const override { return t_; }
  std::string plan_summary() const override { return summary_; }
  BatchResult step(const void* input, const uint8_t* labels, int n) override;
  BatchResult evaluate(const void* input, const uint8_t* labels, int n) override;
  void read_parameters(std::span<float> out) const override;
  void write_parameters(std::span<const float> in) override;
  OptimizerState read_optimizer_state() const override;
  void write_optimizer_state(const OptimizerState& state) override;

  // Beyond the interface (tests, benchmarks):
  // A step on n samples already in this GPU's memory (raw input as step() takes it, labels as
  // bytes). The labels are NOT checked (they are on the device): the caller checks them once.
  BatchResult step_device(const void* device_input, const uint8_t* device_labels, int n);
  // Forward, loss and backward without the update (the step count stays); then read_gradients.
  BatchResult compute_gradients(const void* input, const uint8_t* labels, int n);
  // Data-parallel training (data_parallel.hpp): the gradients of this replica's n samples of a batch
  // of n_total, i.e. of (their loss sum) / n_total, so that the sum over replicas is the batch's
  // gradient; then, once the replicas' gradients are summed in gradient_data(), apply_update().
  BatchResult shard_gradients(const void* input, const uint8_t* labels, int n, int n_total);
  void apply_update();
  // Throws std::invalid_argument for a label that is not one of the model's classes.
  void check_labels(const uint8_t* labels, int n) const;
  // A replica with no sample in a batch (fewer samples than GPUs) contributes zeros.
  void zero_gradients();
  float* gradient_data() const { return grads_.data(); }
  int device() const { return device_; }
  size_t input_sample_bytes() const { return sample_bytes_; }
  void read_gradients(std::span<float> out) const;
  // CUDA-graph replay on (the default) or off: plain launches, for tests that compare the two.
  void use_graphs(bool on) { graphs_on_ = on; }
  bool graphs_on() const { return graphs_on_; }
  cudaStream_t stream() const { return stream_.get(); }
  // Fills every activation and gradient buffer with NaN (all bits set), so a test sees any read of
  // something no kernel of the step wrote.
  void poison_buffers();

 protected:
  enum class Mode { Train, Evaluate, Gradients, Shard };
  // `backend` names the backend in messages ("custom", "cudnn").
  DeviceTrainer(const Graph& graph, const TrainOptions& options, std::string backend);
  // Called by the derived constructor once its ops are planned: a dry run of enqueue_backward finds
  // the gradient buffers read before any op writes them.
  void finish_plan();

  // Host-side preparation for a batch of n (re-describing library tensors), before the enqueues.
  virtual void prepare(int /*n*/) {}
  virtual void enqueue_forward(int n) = 0;
  // In host_trainer.hpp's order (nodes backwards); dry_run: record reads and writes, enqueue nothing.
  virtual void enqueue_backward(int n, bool dry_run) = 0;
  // Derived buffers a test should poison too.
  virtual void poison_more(cudaStream_t /*stream*/) {}

  // One backward pass's bookkeeping: which gradient buffers have been written so far.
  class GradientWrites {
   public:
    GradientWrites(DeviceTrainer& trainer, int n, bool dry_run);
    // The kernel about to run reads v's gradient (a dry run records a buffer read before written).
    void read(int v);
    // The kernel about to run writes v's gradient: whether it must add to what is there.
    bool write(int v);

   private:
    DeviceTrainer& t_;
    bool dry_run_;
    std::vector<bool> written_;
  };

  // The backward of add and of concat (element-wise, the same in every trainer): dy (count floats of
  // add's output; concat's [n, output elements]) to each input's gradient buffer in input order; an
  // input read twice gets it twice. `acc`: whether the first input's buffer is added to.
  void add_backward(const std::vector<int>& inputs, const float* dy, long long count, bool acc,
                    GradientWrites& writes, cudaStream_t s);
  void concat_backward(int output, const std::vector<int>& inputs, const float* dy, int n, bool acc,
                       GradientWrites& writes, cudaStream_t s);

  int root(int v) const;
  float* act(int v) const;
  float* grad(int v) const;  // null where the value has no gradient buffer
  float* param(int index) const;
  float* pgrad(int index) const;

  std::string backend_;
  Graph graph_;
  OptimizerOptions opt_;
  int max_batch_ = 0;
  int64_t t_ = 0;
  gpu::Stream stream_;
  gpu::DeviceBuffer<float> params_, grads_, state1_, state2_;
  std::vector<gpu::DeviceBuffer<float>> act_, grad_;  // per value; empty for aliases, unneeded gradients
  std::vector<bool> needs_;
  int logits_ = -1, loss_node_ = -1, prob_ = -1;
  int classes_ = 0;
  std::string summary_;
  int device_ = 0;  // the device current at construction: every entry point runs with it current
  // Library-backed trainers (cudnn): before the first capture of a batch size, run the gradient
  // pass once with plain launches (libraries may set up per-function state on a first call, which
  // must not happen inside a capture: PyTorch warms up before torch.cuda.graph for that reason;
  // it writes activations and gradients only, which the captured step overwrites); and if the
  // capture still fails, run plain launches from then on, saying so in plan_summary(), rather than
  // fail the step: the bits are the same either way. The custom trainer leaves both off.
  bool warm_up_before_capture_ = false;
  bool capture_fallback_ = false;

 private:
  void check_batch(const void* input, const uint8_t* labels, int n) const;
  void upload(const void* input, const uint8_t* labels, int n, cudaMemcpyKind kind);
  BatchResult finish(int n, Mode mode);
  void enqueue(int n, Mode mode);
  void enqueue_update();
  // The graph of (n, mode), captured on first use; null when capture failed and capture_fallback_.
  cudaGraphExec_t graph_for(int n, Mode mode);
  cudaGraphExec_t capture(int n, Mode mode);

  std::vector<int> zero_roots_;  // gradient buffers read before any kernel writes them: zeroed first
  std::vector<std::pair<int64_t, int64_t>> active_;  // [offset, end) of parameters the optimiser updates
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
  int shard_total_ = 0;  // Mode::Shard: the batch whose mean loss the gradients are of
  // (n, mode key) -> instantiated graph; the key of Mode::Shard includes shard_total_ (its 1/n_total
  // is a kernel argument).
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs_;
};

}  // namespace engine::gpu::train

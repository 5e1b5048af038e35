#pragma once
// Training, as small as inference: a backend compiles a planned Graph once into a TrainExecutable
// that owns the parameters, their gradients, the optimiser state and every activation buffer in
// the backend's own memory (host or device). step() then allocates nothing, like run() (TensorRT's
// build-once, run-many; ggml's graph_compute on a backward graph).
//
// The loss is always softmax + cross-entropy, fused: the first output of the graph must be a
// softmax node, and the loss of a sample is -log softmax(z)[label] on that node's input z (the
// logits); a batch's loss is the mean over its samples, as torch.nn.functional.cross_entropy and
// Keras' sparse_categorical_crossentropy. Other outputs take no part in training.
//
// Determinism is part of the contract: the same parameters, batches and options give bitwise the
// same parameters after step(), run after run and whatever the thread count. A backend reaches it
// with fixed reduction orders (no floating-point atomics; each sum owned by one thread).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/optimizer.hpp"

namespace engine {

struct TrainOptions {
  int max_batch = 32;  // largest n a step() or evaluate() may be given
  int threads = 0;     // CPU backends: threads (0 = all cores); GPU backends ignore it
  OptimizerOptions optimizer;
  // GPU backends: the devices to train on (indices of Backend::devices()); empty: the current one.
  // Several: data-parallel (engine/gpu/train/data_parallel.hpp), max_batch split across them.
  // CPU backends refuse a non-empty list.
  std::vector<int> devices;
};

// What a checkpoint needs besides the parameters to continue training exactly where it stopped:
// the steps taken (the learning rate's t, Adam's bias correction) and the optimiser's two buffers,
// parameter_count() floats each, laid out as parameters() says: SGD's momentum buffer or Adam's m,
// and Adam's v. A buffer the optimiser does not keep (SGD: the second; no momentum: both) is zeros.
struct OptimizerState {
  int64_t steps = 0;
  std::vector<float> first, second;
};

// What one batch gave: the loss summed over its samples (the step minimised loss_sum / n) and how
// many samples the logits' argmax (first maximum) classified as their label.
struct BatchResult {
  double loss_sum = 0;
  int64_t correct = 0;
};

// One parameter tensor, in the order read_parameters()/write_parameters() lay them end to end:
// nodes in plan order, weight (scale_shift: scale) before bias (shift).
struct ParameterInfo {
  const formats::Node* node = nullptr;  // points into Graph::model
  bool is_bias = false;                 // bias, or scale_shift's shift
  std::string name;                     // the tensor's name in the weights file
  Shape shape;
  int64_t offset = 0;                   // into the concatenation, in floats
  int64_t elements = 0;
};

// Parameters of every conv2d, dense and scale_shift node of the graph, in plan order.
std::vector<ParameterInfo> parameter_layout(const Graph& graph);

// Throws std::invalid_argument when the graph cannot be trained: the first output is not a
// softmax node (the loss needs the logits), or the model has no parameter at all.
void check_trainable(const Graph& graph);

// Throws std::invalid_argument, naming `who`, unless both buffers of `state` hold `count` floats
// and its step count is not negative (write_optimizer_state's check, shared by every trainer).
void check_optimizer_state(const OptimizerState& state, int64_t count, const std::string& who);

class TrainExecutable {
 public:
  virtual ~TrainExecutable() = default;
  virtual int max_batch() const = 0;
  // One optimiser step on n samples (1 <= n <= max_batch()): forward, loss, backward, update.
  // `input` holds n raw samples in the model's input dtype (as Executable::run); labels[i] is the
  // class of sample i and must be below the logits' size (std::invalid_argument otherwise, before
  // anything changes).
  virtual BatchResult step(const void* input, const uint8_t* labels, int n) = 0;
  // Loss and correct count of n samples with the current parameters; changes nothing.
  virtual BatchResult evaluate(const void* input, const uint8_t* labels, int n) = 0;
  // Steps taken so far (the `t` of the learning-rate decay and of Adam's bias correction).
  virtual int64_t steps_taken() const = 0;
  // Every parameter, rounded to float32, laid out as parameters() says (checkpoints, output).
  virtual void read_parameters(std::span<float> out) const = 0;
  // Replaces every parameter (optimiser state and step count are kept: this is not a restart).
  virtual void write_parameters(std::span<const float> in) = 0;
  // The optimiser's state, rounded to float32 (checkpoints), and its replacement (--resume): a
  // float32 trainer given back what it read continues bit for bit as if never stopped.
  virtual OptimizerState read_optimizer_state() const = 0;
  // Throws std::invalid_argument when a buffer's size is not parameter_count(); nothing changes then.
  virtual void write_optimizer_state(const OptimizerState& state) = 0;
  virtual std::string plan_summary() const { return {}; }

  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  int64_t parameter_count() const {
    return parameters_.empty() ? 0 : parameters_.back().offset + parameters_.back().elements;
  }

 protected:
  std::vector<ParameterInfo> parameters_;
};

}  // namespace engine

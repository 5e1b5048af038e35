// DeviceTrainer: the buffers, the step flow and CUDA-graph capture that GpuTrainer (custom) and
// CudnnTrainer (cudnn) share. Moved here from gpu_trainer.cpp unchanged in what it enqueues and in
// which order, so the custom trainer's results keep their bits.
#include "engine/gpu/train/device_trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "engine/gpu/device.hpp"
#include "engine/gpu/preprocess.hpp"
#include "engine/gpu/train/pointwise_train.hpp"

namespace engine::gpu::train {
namespace {

// Ends a capture that an exception interrupted, so the stream is usable again.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
  (void)cudaGetLastError();
}

}  // namespace

DeviceTrainer::DeviceTrainer(const Graph& graph, const TrainOptions& options, std::string backend)
    : backend_(std::move(backend)), graph_(graph), opt_(options.optimizer), max_batch_(options.max_batch) {
  check_trainable(graph_);
  if (max_batch_ < 1) throw std::invalid_argument(backend_ + ": max_batch must be at least 1");
  CUDA_CHECK(cudaGetDevice(&device_));
  if (graph_.values[size_t(graph_.input)].alias_of >= 0) throw std::logic_error("graph input is an alias");
  parameters_ = parameter_layout(graph_);
  const int64_t count = parameter_count();
  const size_t B = size_t(max_batch_);

  // Parameters, as host_trainer.hpp lays them out (parameter_layout()).
  params_ = gpu::DeviceBuffer<float>(size_t(count), "parameters");
  grads_ = gpu::DeviceBuffer<float>(size_t(count), "parameter gradients");
  state1_ = gpu::DeviceBuffer<float>(size_t(count), "optimiser state (momentum / Adam m)");
  if (opt_.kind == OptimizerKind::Adam) state2_ = gpu::DeviceBuffer<float>(size_t(count), "optimiser state (Adam v)");
  {
    std::vector<float> host(static_cast<size_t>(count));
    for (const ParameterInfo& p : parameters_) {
      const auto& tensor = p.is_bias ? p.node->bias : p.node->weight;
      std::copy(tensor->values.begin(), tensor->values.end(), host.begin() + p.offset);
    }
    CUDA_CHECK(cudaMemcpyAsync(params_.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice,
                               stream_.get()));
    CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_.get()));
    CUDA_CHECK(cudaMemsetAsync(state1_.data(), 0, state1_.bytes(), stream_.get()));
    if (state2_.size()) CUDA_CHECK(cudaMemsetAsync(state2_.data(), 0, state2_.bytes(), stream_.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));  // `host` goes out of scope
  }

  // Activations, and which values the loss depends on (host_trainer.hpp's walk).
  const size_t values = graph_.values.size();
  act_.resize(values);
  grad_.resize(values);
  for (size_t v = 0; v < values; ++v)
    if (graph_.values[v].alias_of < 0)
      act_[v] = gpu::DeviceBuffer<float>(size_t(graph_.values[v].elements) * B, "activation " + graph_.values[v].name);
  loss_node_ = graph_.value(graph_.outputs[0]).producer;
  logits_ = graph_.nodes[size_t(loss_node_)].inputs[0];
  prob_ = graph_.outputs[0];
  classes_ = int(graph_.value(logits_).elements);
  if (classes_ > 256)
    throw std::invalid_argument(fmt::format("{}: {} classes; labels are bytes (at most 256)", backend_, classes_));
  needs_.assign(values, false);
  needs_[size_t(logits_)] = true;
  for (int i = int(graph_.nodes.size()) - 1; i >= 0; --i) {
    const PlannedNode& pn = graph_.nodes[size_t(i)];
    if (i == loss_node_ || !needs_[size_t(pn.output)]) continue;
    for (int in : pn.inputs) needs_[size_t(in)] = true;
  }
  for (size_t v = 0; v < values; ++v)
    if (needs_[v] && int(v) != graph_.input && graph_.values[v].alias_of < 0)
      grad_[v] = gpu::DeviceBuffer<float>(act_[v].size(), "gradient of " + graph_.values[v].name);

  // Parameters of nodes the loss does not depend on are left alone (host_trainer.hpp's update()).
  for (size_t p = 0; p < parameters_.size(); ++p) {
    bool active = false;
    for (const PlannedNode& pn : graph_.nodes)
      if (pn.node == parameters_[p].node && needs_[size_t(pn.output)]) active = true;
    if (!active) continue;
    const int64_t begin = parameters_[p].offset, end = begin + parameters_[p].elements;
    if (!active_.empty() && active_.back().second == begin) active_.back().second = end;
    else active_.emplace_back(begin, end);
  }

  // Input and label staging, result and scalars.
  const auto& spec = graph_.model->input;
  uint8_input_ = spec.dtype == formats::InputDType::UInt8;
  const int64_t raw_elements = formats::element_count(spec.raw_shape);
  sample_bytes_ = size_t(raw_elements) * (uint8_input_ ? 1 : sizeof(float));
  raw_staging_ = gpu::PinnedBuffer<uint8_t>(sample_bytes_ * B, "input staging");
  labels_staging_ = gpu::PinnedBuffer<uint8_t>(B, "label staging");
  labels_ = gpu::DeviceBuffer<uint8_t>(B, "labels");
  losses_ = gpu::DeviceBuffer<float>(B, "per-sample losses");
  result_ = gpu::DeviceBuffer<LossResult>(1, "loss result");
  result_host_ = gpu::PinnedBuffer<LossResult>(1, "loss result (host)");
  scalars_ = gpu::DeviceBuffer<StepScalars>(1, "optimiser scalars");
  scalars_host_ = gpu::PinnedBuffer<StepScalars>(1, "optimiser scalars (host)");
  if (uint8_input_) {
    raw_ = gpu::DeviceBuffer<uint8_t>(sample_bytes_ * B, "raw input");
    const formats::Preprocess& p = *spec.preprocess;
    mean_ = gpu::DeviceBuffer<float>(p.mean.size(), "preprocess mean");
    std_ = gpu::DeviceBuffer<float>(p.std.size(), "preprocess std");
    CUDA_CHECK(cudaMemcpy(mean_.data(), p.mean.data(), p.mean.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(std_.data(), p.std.data(), p.std.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
}

void DeviceTrainer::finish_plan() { enqueue_backward(0, /*dry_run=*/true); }

DeviceTrainer::~DeviceTrainer() {
  // Made current before the graphs and (after this body) the buffers are freed.
  cudaSetDevice(device_);
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
}

int DeviceTrainer::root(int v) const { return graph_.storage_root(v); }
float* DeviceTrainer::act(int v) const { return act_[size_t(root(v))].data(); }
float* DeviceTrainer::grad(int v) const {
  const auto& g = grad_[size_t(root(v))];
  return g.size() ? g.data() : nullptr;
}
float* DeviceTrainer::param(int index) const {
  return index < 0 ? nullptr : params_.data() + parameters_[size_t(index)].offset;
}
float* DeviceTrainer::pgrad(int index) const {
  return index < 0 ? nullptr : grads_.data() + parameters_[size_t(index)].offset;
}

DeviceTrainer::GradientWrites::GradientWrites(DeviceTrainer& trainer, int n, bool dry_run)
    : t_(trainer), dry_run_(dry_run), written_(trainer.graph_.values.size(), false) {
  written_[size_t(t_.root(t_.logits_))] = true;
  if (dry_run) return;
  for (int r : t_.zero_roots_) {
    CUDA_CHECK(cudaMemsetAsync(t_.grad_[size_t(r)].data(), 0,
                               size_t(n) * size_t(t_.graph_.values[size_t(r)].elements) * sizeof(float),
                               t_.stream_.get()));
    written_[size_t(r)] = true;
  }
}

void DeviceTrainer::GradientWrites::read(int v) {
  const int r = t_.root(v);
  auto& roots = t_.zero_roots_;
  if (dry_run_ && !written_[size_t(r)] && std::find(roots.begin(), roots.end(), r) == roots.end()) roots.push_back(r);
}

bool DeviceTrainer::GradientWrites::write(int v) {
  const int r = t_.root(v);
  const bool acc = written_[size_t(r)];
  written_[size_t(r)] = true;
  return acc;
}

void DeviceTrainer::check_batch(const void* input, const uint8_t* labels, int n) const {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("{}: batch of {} samples outside 1..{}", backend_, n, max_batch_));
  if (!input || !labels) throw std::invalid_argument(backend_ + ": no input or no labels");
}

// Host labels only (step_device's are on the device): before anything is uploaded or changed.
void DeviceTrainer::check_labels(const uint8_t* labels, int n) const {
  for (int s = 0; s < n; ++s)
    if (labels[s] >= classes_)
      throw std::invalid_argument(fmt::format("{}: label {} of sample {} is not one of the model's {} classes",
                                              backend_, int(labels[s]), s, classes_));
}

void DeviceTrainer::upload(const void* input, const uint8_t* labels, int n, cudaMemcpyKind kind) {
  const size_t bytes = sample_bytes_ * size_t(n);
  void* dst = uint8_input_ ? static_cast<void*>(raw_.data()) : static_cast<void*>(act(graph_.input));
  const void* src = input;
  const uint8_t* lsrc = labels;
  if (kind == cudaMemcpyHostToDevice) {  // through pinned memory: an asynchronous, full-speed copy
    std::memcpy(raw_staging_.data(), input, bytes);
    std::memcpy(labels_staging_.data(), labels, size_t(n));
    src = raw_staging_.data();
    lsrc = labels_staging_.data();
  }
  CUDA_CHECK_CTX(cudaMemcpyAsync(dst, src, bytes, kind, stream_.get()), "train: input upload");
  CUDA_CHECK_CTX(cudaMemcpyAsync(labels_.data(), lsrc, size_t(n), kind, stream_.get()), "train: label upload");
}

BatchResult DeviceTrainer::step(const void* input, const uint8_t* labels, int n) {
  gpu::DeviceGuard guard(device_);
  check_batch(input, labels, n);
  check_labels(labels, n);
  upload(input, labels, n, cudaMemcpyHostToDevice);
  return finish(n, Mode::Train);
}

BatchResult DeviceTrainer::step_device(const void* device_input, const uint8_t* device_labels, int n) {
  gpu::DeviceGuard guard(device_);
  check_batch(device_input, device_labels, n);
  upload(device_input, device_labels, n, cudaMemcpyDeviceToDevice);
  return finish(n, Mode::Train);
}

BatchResult DeviceTrainer::evaluate(const void* input, const uint8_t* labels, int n) {
  gpu::DeviceGuard guard(device_);
  check_batch(input, labels, n);
  check_labels(labels, n);
  upload(input, labels, n, cudaMemcpyHostToDevice);
  return finish(n, Mode::Evaluate);
}

BatchResult DeviceTrainer::compute_gradients(const void* input, const uint8_t* labels, int n) {
  gpu::DeviceGuard guard(device_);
  check_batch(input, labels, n);
  check_labels(labels, n);
  upload(input, labels, n, cudaMemcpyHostToDevice);
  return finish(n, Mode::Gradients);
}

BatchResult DeviceTrainer::shard_gradients(const void* input, const uint8_t* labels, int n, int n_total) {
  gpu::DeviceGuard guard(device_);
  check_batch(input, labels, n);
  check_labels(labels, n);
  if (n_total < n) throw std::invalid_argument(fmt::format("{}: a shard of {} of a batch of {}", backend_, n, n_total));
  shard_total_ = n_total;
  upload(input, labels, n, cudaMemcpyHostToDevice);
  return finish(n, Mode::Shard);
}

void DeviceTrainer::zero_gradients() {
  gpu::DeviceGuard guard(device_);
  CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_.get()));
}

void DeviceTrainer::apply_update() {
  gpu::DeviceGuard guard(device_);
  cudaStream_t s = stream_.get();
  *scalars_host_.data() = step_scalars(opt_, t_);
  CUDA_CHECK(cudaMemcpyAsync(scalars_.data(), scalars_host_.data(), sizeof(StepScalars), cudaMemcpyHostToDevice, s));
  enqueue_update();
  CUDA_CHECK_CTX(cudaStreamSynchronize(s), "train: update");
  ++t_;
}

BatchResult DeviceTrainer::finish(int n, Mode mode) {
  cudaStream_t s = stream_.get();
  if (mode == Mode::Train) {
    // The host buffer is not rewritten before this copy has run: finish() waits for the stream.
    *scalars_host_.data() = step_scalars(opt_, t_);
    CUDA_CHECK(cudaMemcpyAsync(scalars_.data(), scalars_host_.data(), sizeof(StepScalars), cudaMemcpyHostToDevice, s));
  }
  cudaGraphExec_t exec = graphs_on_ && mode != Mode::Gradients ? graph_for(n, mode) : nullptr;
  if (exec) {
    CUDA_CHECK_CTX(cudaGraphLaunch(exec, s), "train: graph launch");
  } else {
    enqueue(n, mode);
  }
  CUDA_CHECK(cudaMemcpyAsync(result_host_.data(), result_.data(), sizeof(LossResult), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK_CTX(cudaStreamSynchronize(s), "train: step");
  if (mode == Mode::Train) ++t_;
  return BatchResult{result_host_.data()->loss_sum, int64_t(result_host_.data()->correct)};
}

cudaGraphExec_t DeviceTrainer::graph_for(int n, Mode mode) {
  const auto key = std::make_pair(n, int64_t(mode) + (mode == Mode::Shard ? 4 * int64_t(shard_total_) : 0));
  if (auto it = graphs_.find(key); it != graphs_.end()) return it->second;
  cudaStream_t s = stream_.get();
  if (warm_up_before_capture_) {
    enqueue(n, mode == Mode::Evaluate ? Mode::Evaluate : Mode::Gradients);  // never the update
    CUDA_CHECK_CTX(cudaStreamSynchronize(s), "train: warm-up before graph capture");
  }
  if (!capture_fallback_) return capture(n, mode);
  try {
    return capture(n, mode);
  } catch (const std::exception& e) {
    // The input and labels are still in place (nothing of the step ran): plain launches from here.
    graphs_on_ = false;
    summary_ += fmt::format("\nCUDA graph capture failed for a batch of {} ({}): plain launches from then on", n,
                            e.what());
    return nullptr;
  }
}

cudaGraphExec_t DeviceTrainer::capture(int n, Mode mode) {
  cudaStream_t s = stream_.get();
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue(n, mode);
  } catch (...) {
    abandon_capture(s);
    throw;
  }
  cudaGraph_t graph = nullptr;
  CUDA_CHECK_CTX(cudaStreamEndCapture(s, &graph), "train: graph capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK_CTX(status, "train: graph instantiation");
  graphs_.emplace(std::make_pair(n, int64_t(mode) + (mode == Mode::Shard ? 4 * int64_t(shard_total_) : 0)), exec);
  return exec;
}

void DeviceTrainer::enqueue(int n, Mode mode) {
  cudaStream_t s = stream_.get();
  prepare(n);
  if (uint8_input_) {
    const auto& spec = graph_.model->input;
    const formats::Preprocess& p = *spec.preprocess;
    gpu::PreprocessShape shape;
    shape.channels = int(spec.raw_shape[0]);
    shape.height = int(spec.raw_shape[1]);
    shape.width = int(spec.raw_shape[2]);
    shape.pad_top = p.pad_top, shape.pad_bottom = p.pad_bottom, shape.pad_left = p.pad_left,
    shape.pad_right = p.pad_right;
    shape.scale = p.scale;
    shape.pad_value = p.pad_value;
    shape.mean = mean_.data();
    shape.std = std_.data();
    gpu::preprocess_uint8(raw_.data(), act(graph_.input), n, shape, s);
  }
  enqueue_forward(n);
  const bool with_grad = mode != Mode::Evaluate;
  softmax_cross_entropy(act(logits_), labels_.data(), act(prob_), with_grad ? grad(logits_) : nullptr, losses_.data(),
                        result_.data(), n, classes_, 1.0f / float(mode == Mode::Shard ? shard_total_ : n), s);
  if (!with_grad) return;
  enqueue_backward(n, false);
  if (mode == Mode::Train) enqueue_update();
}

void DeviceTrainer::enqueue_update() {
  for (const auto& [begin, end] : active_)
    optimizer_step(opt_, params_.data() + begin, grads_.data() + begin, state1_.data() + begin,
                   state2_.size() ? state2_.data() + begin : nullptr, end - begin, scalars_.data(), stream_.get());
}

void DeviceTrainer::read_parameters(std::span<float> out) const {
  gpu::DeviceGuard guard(device_);
  if (int64_t(out.size()) != parameter_count())
    throw std::invalid_argument(fmt::format("{}: {} floats for {} parameters", backend_, out.size(), parameter_count()));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), params_.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void DeviceTrainer::read_gradients(std::span<float> out) const {
  gpu::DeviceGuard guard(device_);
  if (int64_t(out.size()) != parameter_count())
    throw std::invalid_argument(fmt::format("{}: {} floats for {} gradients", backend_, out.size(), parameter_count()));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), grads_.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void DeviceTrainer::write_parameters(std::span<const float> in) {
  gpu::DeviceGuard guard(device_);
  if (int64_t(in.size()) != parameter_count())
    throw std::invalid_argument(fmt::format("{}: {} floats for {} parameters", backend_, in.size(), parameter_count()));
  CUDA_CHECK(cudaMemcpyAsync(params_.data(), in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

OptimizerState DeviceTrainer::read_optimizer_state() const {
  gpu::DeviceGuard guard(device_);
  OptimizerState s;
  s.steps = t_;
  s.first.assign(size_t(parameter_count()), 0.0f);
  s.second.assign(size_t(parameter_count()), 0.0f);
  CUDA_CHECK(cudaMemcpyAsync(s.first.data(), state1_.data(), state1_.bytes(), cudaMemcpyDeviceToHost, stream_.get()));
  if (state2_.size())
    CUDA_CHECK(cudaMemcpyAsync(s.second.data(), state2_.data(), state2_.bytes(), cudaMemcpyDeviceToHost, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  return s;
}

void DeviceTrainer::write_optimizer_state(const OptimizerState& s) {
  gpu::DeviceGuard guard(device_);
  check_optimizer_state(s, parameter_count(), backend_);
  CUDA_CHECK(cudaMemcpyAsync(state1_.data(), s.first.data(), state1_.bytes(), cudaMemcpyHostToDevice, stream_.get()));
  if (state2_.size())
    CUDA_CHECK(cudaMemcpyAsync(state2_.data(), s.second.data(), state2_.bytes(), cudaMemcpyHostToDevice, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  t_ = s.steps;
}

void DeviceTrainer::poison_buffers() {
  gpu::DeviceGuard guard(device_);
  cudaStream_t s = stream_.get();
  for (const auto* list : {&act_, &grad_})
    for (const auto& b : *list)
      if (b.size()) CUDA_CHECK(cudaMemsetAsync(b.data(), 0xff, b.bytes(), s));
  CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0xff, grads_.bytes(), s));
  CUDA_CHECK(cudaMemsetAsync(losses_.data(), 0xff, losses_.bytes(), s));
  poison_more(s);
  CUDA_CHECK(cudaStreamSynchronize(s));
}

void DeviceTrainer::add_backward(const std::vector<int>& inputs, const float* dy, long long count, bool acc,
                                 GradientWrites& writes, cudaStream_t s) {
  bool first = true;
  for (int v : inputs) {
    float* d = needs_[size_t(v)] && v != graph_.input ? grad(v) : nullptr;
    const bool a = first ? acc : (d ? writes.write(v) : false);
    if (d) add_gradient(dy, d, count, a, s);
    first = false;
  }
}

void DeviceTrainer::concat_backward(int output, const std::vector<int>& inputs, const float* dy, int n, bool acc,
                                    GradientWrites& writes, cudaStream_t s) {
  const int64_t total = graph_.value(output).elements;
  int64_t offset = 0;
  bool first = true;
  for (int v : inputs) {
    const int64_t e = graph_.values[size_t(v)].elements;
    float* d = needs_[size_t(v)] && v != graph_.input ? grad(v) : nullptr;
    const bool a = first ? acc : (d ? writes.write(v) : false);
    if (d) train::concat_backward(dy, d, n, e, offset, total, a, s);
    offset += e;
    first = false;
  }
}

}  // namespace engine::gpu::train

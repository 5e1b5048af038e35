// GpuTrainer: planning (buffers, steps, which gradients are needed and which kernel writes each
// gradient buffer first), the step's enqueue order, CUDA-graph capture and replay. Plain C++ (fmt
// is fine here); the kernels are in the .cu files beside it.
#include "engine/custom/train/gpu_trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "engine/custom/train/conv_train.hpp"
#include "engine/custom/train/dense_train.hpp"
#include "engine/custom/train/pointwise_train.hpp"
#include "engine/custom/train/pool_train.hpp"
#include "engine/gpu/device.hpp"
#include "engine/gpu/preprocess.hpp"

namespace engine::custom::train {
namespace {

Pointwise pointwise_of(OpType op) {
  return op == OpType::Relu ? Pointwise::Relu : op == OpType::Tanh ? Pointwise::Tanh : Pointwise::Sigmoid;
}

// Ends a capture that an exception interrupted, so the stream is usable again.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
  (void)cudaGetLastError();
}

}  // namespace

GpuTrainer::GpuTrainer(const Graph& graph, const TrainOptions& options, bool fold_activations)
    : graph_(graph), opt_(options.optimizer), max_batch_(options.max_batch) {
  check_trainable(graph_);
  if (max_batch_ < 1) throw std::invalid_argument("custom: max_batch must be at least 1");
  CUDA_CHECK(cudaGetDevice(&device_.device));
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
  if (classes_ > 256) throw std::invalid_argument(fmt::format("custom: {} classes; labels are bytes (at most 256)", classes_));
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

  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const PlannedNode& pn = graph_.nodes[i];
    const formats::Node& node = *pn.node;
    Step st;
    st.op = node.op;
    st.inputs = pn.inputs;
    st.output = pn.output;
    const Value& in = graph_.value(pn.inputs[0]);
    const Value& out = graph_.value(pn.output);
    st.elements = in.elements;
    for (size_t p = 0; p < parameters_.size(); ++p)
      if (parameters_[p].node == &node) (parameters_[p].is_bias ? st.bias : st.weight) = int(p);
    switch (node.op) {
      case OpType::Conv2D: case OpType::AvgPool: case OpType::MaxPool: {
        WindowGeom& g = st.geom;
        g.in_c = int(in.shape.at(0)), g.in_h = int(in.shape.at(1)), g.in_w = int(in.shape.at(2));
        g.out_c = int(out.shape.at(0)), g.out_h = int(out.shape.at(1)), g.out_w = int(out.shape.at(2));
        g.kh = node.window.kernel_h, g.kw = node.window.kernel_w;
        g.sh = node.window.stride_h, g.sw = node.window.stride_w;
        g.pt = node.window.pad_top, g.pl = node.window.pad_left;
        g.count_include_pad = node.count_include_pad;
        if (node.op == OpType::MaxPool)
          st.argmax = gpu::DeviceBuffer<int>(size_t(out.elements) * B, "maxpool argmax of " + node.name);
        if (node.op == OpType::Conv2D)
          if (const long long floats = conv_param_partials(g, int(B)); floats > 0)
            st.param_partials = gpu::DeviceBuffer<float>(size_t(floats), "weight-gradient partial sums of " + node.name);
        break;
      }
      case OpType::Dense: st.units = node.units; break;
      case OpType::ScaleShift:
        st.channels = in.shape.at(0);
        st.elements = in.elements / st.channels;
        break;
      default: break;
    }
    steps_.push_back(std::move(st));
  }
  // Folding: the activation must be the producer's only reader and its output no graph output, so
  // the producer's own value is read by nothing else (the inference planner's rule).
  if (fold_activations)
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step& st = steps_[i];
      if (st.op != OpType::Conv2D && st.op != OpType::Dense) continue;
      const Value& z = graph_.value(st.output);
      if (z.is_output || z.consumers.size() != 1 || z.consumers[0] <= int(i)) continue;
      Step& a = steps_[size_t(z.consumers[0])];
      if (a.op != OpType::Relu && a.op != OpType::Tanh && a.op != OpType::Sigmoid) continue;
      st.act = int(pointwise_of(a.op));
      st.act_value = a.output;
      a.folded = true;
    }
  enqueue_backward(0, /*dry_run=*/true);  // finds zero_roots_

  // Parameters of nodes the loss does not depend on are left alone (host_trainer.hpp's update()).
  for (size_t p = 0; p < parameters_.size(); ++p) {
    bool active = false;
    for (const Step& st : steps_)
      if ((st.weight == int(p) || st.bias == int(p)) && needs_[size_t(st.output)]) active = true;
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
  summary_ = fmt::format(
      "custom: {} nodes, {} parameters, batches up to {}, float32 (fixed-order sums, no FMA contraction, no "
      "atomics), {}, CUDA graph per batch size, {} activations folded into conv2d/dense kernels",
      graph_.nodes.size(), count, max_batch_, opt_.kind == OptimizerKind::Adam ? "Adam" : "SGD",
      std::count_if(steps_.begin(), steps_.end(), [](const Step& st) { return st.folded; }));
}

GpuTrainer::~GpuTrainer() {
  cudaSetDevice(device_.device);
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
}

int GpuTrainer::root(int v) const {
  while (graph_.values[size_t(v)].alias_of >= 0) v = graph_.values[size_t(v)].alias_of;
  return v;
}
float* GpuTrainer::act(int v) const { return act_[size_t(root(v))].data(); }
float* GpuTrainer::grad(int v) const {
  const auto& g = grad_[size_t(root(v))];
  return g.size() ? g.data() : nullptr;
}
float* GpuTrainer::param(int index) const { return index < 0 ? nullptr : params_.data() + parameters_[size_t(index)].offset; }
float* GpuTrainer::pgrad(int index) const { return index < 0 ? nullptr : grads_.data() + parameters_[size_t(index)].offset; }

void GpuTrainer::check_batch(const void* input, const uint8_t* labels, int n) const {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("custom: batch of {} samples outside 1..{}", n, max_batch_));
  if (!input || !labels) throw std::invalid_argument("custom: no input or no labels");
}

// Host labels only (step_device's are on the device): before anything is uploaded or changed.
void GpuTrainer::check_labels(const uint8_t* labels, int n) const {
  for (int s = 0; s < n; ++s)
    if (labels[s] >= classes_)
      throw std::invalid_argument(fmt::format("custom: label {} of sample {} is not one of the model's {} classes",
                                              int(labels[s]), s, classes_));
}

void GpuTrainer::upload(const void* input, const uint8_t* labels, int n, cudaMemcpyKind kind) {
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

BatchResult GpuTrainer::step(const void* input, const uint8_t* labels, int n) {
  gpu::DeviceGuard guard(device_.device);
  check_batch(input, labels, n);
  check_labels(labels, n);
  upload(input, labels, n, cudaMemcpyHostToDevice);
  return finish(n, Mode::Train);
}

BatchResult GpuTrainer::step_device(const void* device_input, const uint8_t* device_labels, int n) {
  gpu::DeviceGuard guard(device_.device);
  check_batch(device_input, device_labels, n);
  upload(device_input, device_labels, n, cudaMemcpyDeviceToDevice);
  return finish(n, Mode::Train);
}

BatchResult GpuTrainer::evaluate(const void* input, const uint8_t* labels, int n) {
  gpu::DeviceGuard guard(device_.device);
  check_batch(input, labels, n);
  check_labels(labels, n);
  upload(input, labels, n, cudaMemcpyHostToDevice);
  return finish(n, Mode::Evaluate);
}

BatchResult GpuTrainer::compute_gradients(const void* input, const uint8_t* labels, int n) {
  gpu::DeviceGuard guard(device_.device);
  check_batch(input, labels, n);
  check_labels(labels, n);
  upload(input, labels, n, cudaMemcpyHostToDevice);
  return finish(n, Mode::Gradients);
}

BatchResult GpuTrainer::finish(int n, Mode mode) {
  cudaStream_t s = stream_.get();
  if (mode == Mode::Train) {
    // The host buffer is not rewritten before this copy has run: finish() waits for the stream.
    *scalars_host_.data() = step_scalars(opt_, t_);
    CUDA_CHECK(cudaMemcpyAsync(scalars_.data(), scalars_host_.data(), sizeof(StepScalars), cudaMemcpyHostToDevice, s));
  }
  if (graphs_on_ && mode != Mode::Gradients) {
    CUDA_CHECK_CTX(cudaGraphLaunch(graph_for(n, mode), s), "train: graph launch");
  } else {
    enqueue(n, mode);
  }
  CUDA_CHECK(cudaMemcpyAsync(result_host_.data(), result_.data(), sizeof(LossResult), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK_CTX(cudaStreamSynchronize(s), "train: step");
  if (mode == Mode::Train) ++t_;
  return BatchResult{result_host_.data()->loss_sum, int64_t(result_host_.data()->correct)};
}

cudaGraphExec_t GpuTrainer::graph_for(int n, Mode mode) {
  const auto key = std::make_pair(n, int(mode));
  if (auto it = graphs_.find(key); it != graphs_.end()) return it->second;
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
  graphs_.emplace(key, exec);
  return exec;
}

void GpuTrainer::enqueue(int n, Mode mode) {
  cudaStream_t s = stream_.get();
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
                        result_.data(), n, classes_, 1.0f / float(n), s);
  if (!with_grad) return;
  enqueue_backward(n, false);
  if (mode == Mode::Train) enqueue_update();
}

void GpuTrainer::enqueue_forward(int n) {
  cudaStream_t s = stream_.get();
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& st = steps_[i];
    if (int(i) == loss_node_ || st.folded) continue;  // the loss kernel writes the probabilities
    const float* x = act(st.inputs[0]);
    float* y = act(st.act >= 0 ? st.act_value : st.output);  // folded: the activation's output
    const long long count = (long long)n * st.elements;
    switch (st.op) {
      case OpType::Conv2D: conv_forward(x, param(st.weight), param(st.bias), y, n, st.geom, st.act, s); break;
      case OpType::AvgPool: avgpool_forward(x, y, n, st.geom, s); break;
      case OpType::MaxPool: maxpool_forward(x, y, st.argmax.data(), n, st.geom, s); break;
      case OpType::Relu: case OpType::Tanh: case OpType::Sigmoid:
        activation_forward(pointwise_of(st.op), x, y, count, s);
        break;
      case OpType::Softmax: softmax_forward(x, y, n, st.elements, s); break;
      case OpType::Add: add_forward(x, act(st.inputs[1]), y, count, s); break;
      case OpType::ScaleShift:
        scale_shift_forward(x, param(st.weight), param(st.bias), y, n, st.channels, st.elements, s);
        break;
      case OpType::Concat: {
        const int64_t total = graph_.value(st.output).elements;
        int64_t offset = 0;
        for (int v : st.inputs) {
          const int64_t e = graph_.values[size_t(v)].elements;
          concat_forward(act(v), y, n, e, offset, total, s);
          offset += e;
        }
        break;
      }
      case OpType::Dense: {
        GemmArgs g;
        g.a = x, g.a_m = st.elements, g.a_k = 1;
        g.b = param(st.weight), g.b_k = 1, g.b_n = st.elements;
        g.bias = param(st.bias);
        g.c = y, g.ldc = st.units;
        g.m = n, g.n = st.units, g.k = int(st.elements);
        g.epilogue_act = st.act;
        gemm(g, s);
        break;
      }
      case OpType::Flatten: break;  // an alias
    }
  }
}

// In host_trainer.hpp's order (nodes backwards). Each gradient buffer's first writer overwrites it
// (the host adds to zeros: the same bits), later writers add; a dry run finds buffers some kernel
// reads before any writes (then zeroed first, as the host zeroes every one).
void GpuTrainer::enqueue_backward(int n, bool dry_run) {
  cudaStream_t s = stream_.get();
  std::vector<bool> written(graph_.values.size(), false);
  written[size_t(root(logits_))] = true;
  auto read = [&](int v) {
    const int r = root(v);
    if (dry_run && !written[size_t(r)] && std::find(zero_roots_.begin(), zero_roots_.end(), r) == zero_roots_.end())
      zero_roots_.push_back(r);
  };
  auto write = [&](int v) {  // whether the kernel must add to what is there
    const int r = root(v);
    const bool acc = written[size_t(r)];
    written[size_t(r)] = true;
    return acc;
  };
  if (!dry_run) {
    for (int r : zero_roots_) {
      CUDA_CHECK(cudaMemsetAsync(grad_[size_t(r)].data(), 0,
                                 size_t(n) * size_t(graph_.values[size_t(r)].elements) * sizeof(float), s));
      written[size_t(r)] = true;
    }
  }
  for (int i = int(steps_.size()) - 1; i >= 0; --i) {
    Step& st = steps_[size_t(i)];
    if (i == loss_node_ || !needs_[size_t(st.output)] || st.op == OpType::Flatten || st.folded) continue;
    // Folded: dy is the activation output's gradient, taken through activation_grad in the kernels.
    const int out_id = st.act >= 0 ? st.act_value : st.output;
    read(out_id);
    const int x_id = st.inputs[0];
    const float* dy = grad(out_id);
    const float* act_y = st.act >= 0 ? act(st.act_value) : nullptr;
    float* dx = needs_[size_t(x_id)] ? grad(x_id) : nullptr;
    const bool acc = dx ? write(x_id) : false;
    if (dry_run) {
      for (size_t k = 1; k < st.inputs.size(); ++k)
        if (needs_[size_t(st.inputs[k])] && grad(st.inputs[k])) write(st.inputs[k]);
      continue;
    }
    const long long count = (long long)n * st.elements;
    switch (st.op) {
      case OpType::Conv2D:
        conv_backward_params(act(x_id), dy, act_y, st.act, pgrad(st.weight), pgrad(st.bias), n, st.geom,
                             st.param_partials.size() > 0 ? st.param_partials.data() : nullptr, s);
        if (dx) conv_backward_input(dy, act_y, st.act, param(st.weight), dx, n, st.geom, acc, s);
        break;
      case OpType::Dense: {
        const int64_t k = st.elements;
        GemmArgs w;  // dW[u, k] = sum over samples of dy[s, u] * x[s, k]
        w.a = dy, w.a_m = 1, w.a_k = st.units;
        w.b = act(x_id), w.b_k = k, w.b_n = 1;
        w.c = pgrad(st.weight), w.ldc = k;
        w.m = st.units, w.n = int(k), w.k = n;
        w.row_sums = pgrad(st.bias);  // db[u] = sum over samples of dy[s, u], in the same launch
        w.a_act = st.act, w.a_act_y = act_y;
        gemm(w, s);
        if (dx) {
          GemmArgs d;  // dx[s, k] (+)= sum over units of dy[s, u] * w[u, k]
          d.a = dy, d.a_m = st.units, d.a_k = 1;
          d.b = param(st.weight), d.b_k = k, d.b_n = 1;
          d.c = dx, d.ldc = k;
          d.m = n, d.n = int(k), d.k = st.units;
          d.accumulate = acc;
          d.a_act = st.act, d.a_act_y = act_y;
          gemm(d, s);
        }
        break;
      }
      case OpType::ScaleShift:
        scale_shift_backward_params(act(x_id), dy, pgrad(st.weight), pgrad(st.bias), n, st.channels, st.elements, s);
        if (dx) scale_shift_backward_input(dy, param(st.weight), dx, n, st.channels, st.elements, acc, s);
        break;
      case OpType::AvgPool: if (dx) avgpool_backward(dy, dx, n, st.geom, acc, s); break;
      case OpType::MaxPool: if (dx) maxpool_backward(dy, st.argmax.data(), dx, n, st.geom, acc, s); break;
      case OpType::Relu: case OpType::Tanh: case OpType::Sigmoid:
        if (dx) activation_backward(pointwise_of(st.op), act(x_id), act(st.output), dy, dx, count, acc, s);
        break;
      case OpType::Softmax: if (dx) softmax_backward(act(st.output), dy, dx, n, st.elements, acc, s); break;
      case OpType::Add: {
        // In input order; add(v, v) adds twice (the second time onto the first).
        bool first = true;
        for (int v : st.inputs) {
          float* d = needs_[size_t(v)] && v != graph_.input ? grad(v) : nullptr;
          const bool a = first ? acc : (d ? write(v) : false);
          if (d) add_gradient(dy, d, count, a, s);
          first = false;
        }
        break;
      }
      case OpType::Concat: {
        const int64_t total = graph_.value(st.output).elements;
        int64_t offset = 0;
        bool first = true;
        for (int v : st.inputs) {
          const int64_t e = graph_.values[size_t(v)].elements;
          float* d = needs_[size_t(v)] && v != graph_.input ? grad(v) : nullptr;
          const bool a = first ? acc : (d ? write(v) : false);
          if (d) concat_backward(dy, d, n, e, offset, total, a, s);
          offset += e;
          first = false;
        }
        break;
      }
      case OpType::Flatten: break;
    }
  }
}

void GpuTrainer::enqueue_update() {
  for (const auto& [begin, end] : active_)
    optimizer_step(opt_, params_.data() + begin, grads_.data() + begin, state1_.data() + begin,
                   state2_.size() ? state2_.data() + begin : nullptr, end - begin, scalars_.data(), stream_.get());
}

void GpuTrainer::read_parameters(std::span<float> out) const {
  gpu::DeviceGuard guard(device_.device);
  if (int64_t(out.size()) != parameter_count())
    throw std::invalid_argument(fmt::format("custom: {} floats for {} parameters", out.size(), parameter_count()));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), params_.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void GpuTrainer::read_gradients(std::span<float> out) const {
  gpu::DeviceGuard guard(device_.device);
  if (int64_t(out.size()) != parameter_count())
    throw std::invalid_argument(fmt::format("custom: {} floats for {} gradients", out.size(), parameter_count()));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), grads_.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void GpuTrainer::write_parameters(std::span<const float> in) {
  gpu::DeviceGuard guard(device_.device);
  if (int64_t(in.size()) != parameter_count())
    throw std::invalid_argument(fmt::format("custom: {} floats for {} parameters", in.size(), parameter_count()));
  CUDA_CHECK(cudaMemcpyAsync(params_.data(), in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void GpuTrainer::poison_buffers() {
  gpu::DeviceGuard guard(device_.device);
  cudaStream_t s = stream_.get();
  for (const auto* list : {&act_, &grad_})
    for (const auto& b : *list)
      if (b.size()) CUDA_CHECK(cudaMemsetAsync(b.data(), 0xff, b.bytes(), s));
  CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0xff, grads_.bytes(), s));
  CUDA_CHECK(cudaMemsetAsync(losses_.data(), 0xff, losses_.bytes(), s));
  for (const Step& st : steps_)
    if (st.argmax.size()) CUDA_CHECK(cudaMemsetAsync(st.argmax.data(), 0x7f, st.argmax.size() * sizeof(int), s));
  CUDA_CHECK(cudaStreamSynchronize(s));
}

std::unique_ptr<TrainExecutable> make_gpu_trainer(const Graph& graph, const TrainOptions& options) {
  return std::make_unique<GpuTrainer>(graph, options);
}

}  // namespace engine::custom::train

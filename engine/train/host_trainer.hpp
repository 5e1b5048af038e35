#pragma once
// A TrainExecutable for host memory, over the scalar type T: reference instantiates it with
// double (engine/reference/train_f64.cpp), cpu with float (engine/cpu/train_f32.cpp). Include it
// from exactly one translation unit per T, compiled with -ffp-contract=off.
//
// The whole batch moves node by node (PyTorch's eager order): every value has a [max_batch,
// elements] buffer kept from the forward pass for the backward one, and a gradient buffer of the
// same size; flatten shares its input's buffers. Everything is allocated by the constructor.
// Parallel loops split samples (activations, input gradients), output channels or units (parameter
// gradients) or parameter elements (optimiser) among OpenMP threads, so each number is computed by
// one thread in the order host_ops.hpp fixes: bitwise the same for any thread count.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/train.hpp"
#include "engine/train/host_ops.hpp"

namespace engine::train {
namespace {  // per translation unit, as host_ops.hpp

template <class T>
class HostTrainer final : public TrainExecutable {
 public:
  HostTrainer(const Graph& graph, const TrainOptions& options, std::string backend)
      : graph_(graph), backend_(std::move(backend)), max_batch_(options.max_batch), opt_(options.optimizer) {
    check_trainable(graph_);
    if (max_batch_ < 1) throw std::invalid_argument(fmt::format("{}: max_batch must be at least 1", backend_));
    if (options.threads < 0) throw std::invalid_argument(fmt::format("{}: threads must be >= 0", backend_));
    threads_ = options.threads > 0 ? options.threads : std::max(1, omp_get_max_threads());
    parameters_ = parameter_layout(graph_);
    const int64_t count = parameter_count();
    params_.resize(size_t(count));
    grads_.assign(size_t(count), T(0));
    state1_.assign(size_t(count), T(0));
    state2_.assign(opt_.kind == OptimizerKind::Adam ? size_t(count) : 0, T(0));
    for (const ParameterInfo& p : parameters_) {
      const auto& tensor = p.is_bias ? p.node->bias : p.node->weight;
      for (int64_t i = 0; i < p.elements; ++i) params_[size_t(p.offset + i)] = T(tensor->values[size_t(i)]);
    }

    const size_t values = graph_.values.size();
    // Every value twice (activation and gradient) for a whole batch: refuse, with a clear message,
    // more than half of the machine's memory (Linux would overcommit and kill the process later).
    double bytes = 0;
    for (const Value& v : graph_.values)
      if (v.alias_of < 0) bytes += 2.0 * double(v.elements) * double(max_batch_) * sizeof(T);
    const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
    if (memory > 0 && bytes > memory / 2)
      throw std::runtime_error(fmt::format(
          "{}: a batch of {} needs {:.1f} GiB of activations and gradients, more than half of this machine's {:.1f} GiB; "
          "use a smaller --batch",
          backend_, max_batch_, bytes / double(1 << 30), memory / double(1 << 30)));
    act_.resize(values);
    grad_.resize(values);
    for (size_t v = 0; v < values; ++v) {
      if (graph_.values[v].alias_of >= 0) continue;
      act_[v].assign(size_t(graph_.values[v].elements) * size_t(max_batch_), T(0));
    }
    logits_ = graph_.nodes[size_t(graph_.value(graph_.outputs[0]).producer)].inputs[0];
    loss_node_ = graph_.value(graph_.outputs[0]).producer;
    classes_ = graph_.value(logits_).elements;

    // Which values the loss depends on (their gradients are needed), walking the plan backwards.
    needs_.assign(values, false);
    needs_[size_t(logits_)] = true;
    for (int i = int(graph_.nodes.size()) - 1; i >= 0; --i) {
      const PlannedNode& pn = graph_.nodes[size_t(i)];
      if (i == loss_node_ || !needs_[size_t(pn.output)]) continue;
      for (int in : pn.inputs) needs_[size_t(in)] = true;
    }
    for (size_t v = 0; v < values; ++v)
      if (needs_[v] && int(v) != graph_.input && graph_.values[v].alias_of < 0)
        grad_[v].assign(act_[v].size(), T(0));
    if (graph_.values[size_t(graph_.input)].alias_of >= 0) throw std::logic_error("graph input is an alias");

    for (size_t i = 0; i < graph_.nodes.size(); ++i) build_step(int(i));
    if (double(scratch_per_thread_) * threads_ * sizeof(T) > double(int64_t{1} << 32))
      throw std::runtime_error(fmt::format("{}: the convolutions' im2col scratch would take {:.1f} GiB", backend_,
                                           double(scratch_per_thread_) * threads_ * sizeof(T) / (1 << 30)));
    scratch_.assign(size_t(scratch_per_thread_) * size_t(threads_), T(0));
    const auto& in = graph_.model->input;
    raw_elements_ = formats::element_count(in.raw_shape);
    if (in.dtype == formats::InputDType::UInt8)
      raw_dims_ = Dims{int(in.raw_shape[0]), int(in.raw_shape[1]), int(in.raw_shape[2])};
    summary_ = fmt::format("{}: {} nodes, {} parameters, batches up to {}, {} threads, {} arithmetic, {}", backend_,
                           graph_.nodes.size(), count, max_batch_, threads_, sizeof(T) == 8 ? "float64" : "float32",
                           opt_.kind == OptimizerKind::Adam ? "Adam" : "SGD");
  }

  int max_batch() const override { return max_batch_; }
  int64_t steps_taken() const override { return t_; }
  std::string plan_summary() const override { return summary_; }

  BatchResult step(const void* input, const uint8_t* labels, int n) override {
    check_batch(input, labels, n);
    forward(input, n);
    const BatchResult r = loss(labels, n, true);
    backward(n);
    update();
    ++t_;
    return r;
  }

  BatchResult evaluate(const void* input, const uint8_t* labels, int n) override {
    check_batch(input, labels, n);
    forward(input, n);
    return loss(labels, n, false);
  }

  // For gradient checks (tests/train): forward, loss and backward without the update, and the
  // parameters and their gradients in T, laid out as parameters() says.
  BatchResult compute_gradients(const void* input, const uint8_t* labels, int n) {
    check_batch(input, labels, n);
    forward(input, n);
    const BatchResult r = loss(labels, n, true);
    backward(n);
    return r;
  }
  T* parameter_data() { return params_.data(); }
  const T* gradient_data() const { return grads_.data(); }

  void read_parameters(std::span<float> out) const override {
    if (int64_t(out.size()) != parameter_count())
      throw std::invalid_argument(fmt::format("{}: {} floats for {} parameters", backend_, out.size(), parameter_count()));
    for (size_t i = 0; i < params_.size(); ++i) out[i] = float(params_[i]);
  }

  void write_parameters(std::span<const float> in) override {
    if (int64_t(in.size()) != parameter_count())
      throw std::invalid_argument(fmt::format("{}: {} floats for {} parameters", backend_, in.size(), parameter_count()));
    for (size_t i = 0; i < params_.size(); ++i) params_[i] = T(in[i]);
  }

  OptimizerState read_optimizer_state() const override {
    OptimizerState s;
    s.steps = t_;
    s.first.assign(params_.size(), 0.0f);
    s.second.assign(params_.size(), 0.0f);
    for (size_t i = 0; i < state1_.size(); ++i) s.first[i] = float(state1_[i]);
    for (size_t i = 0; i < state2_.size(); ++i) s.second[i] = float(state2_[i]);
    return s;
  }

  void write_optimizer_state(const OptimizerState& s) override {
    check_optimizer_state(s, parameter_count(), backend_);
    for (size_t i = 0; i < state1_.size(); ++i) state1_[i] = T(s.first[i]);
    for (size_t i = 0; i < state2_.size(); ++i) state2_[i] = T(s.second[i]);
    t_ = s.steps;
  }

 private:
  struct Step {
    OpType op = OpType::Relu;
    std::vector<int> inputs;
    int output = -1;
    Dims in, out;
    const formats::Window2D* win = nullptr;
    ConvShape cs;  // conv2d
    bool cip = true;
    int64_t elements = 0;  // input elements per sample (scale_shift: per channel)
    int64_t channels = 0;  // scale_shift
    int units = 0;
    int weight = -1, bias = -1;  // indices into parameters_
    std::vector<T> wt;           // dense: weight transposed, [k][units], refreshed each forward
  };

  int root(int v) const { return graph_.storage_root(v); }
  T* act(int v, int s = 0) { return act_[size_t(root(v))].data() + int64_t(s) * graph_.values[size_t(v)].elements; }
  T* grad(int v, int s = 0) {
    auto& g = grad_[size_t(root(v))];
    return g.empty() ? nullptr : g.data() + int64_t(s) * graph_.values[size_t(v)].elements;
  }
  T* thread_scratch() { return scratch_.data() + int64_t(omp_get_thread_num()) * scratch_per_thread_; }
  T* param(int index) { return index < 0 ? nullptr : params_.data() + parameters_[size_t(index)].offset; }
  T* pgrad(int index) { return index < 0 ? nullptr : grads_.data() + parameters_[size_t(index)].offset; }

  static Dims dims(const Shape& s) { return Dims{int(s.at(0)), int(s.at(1)), int(s.at(2))}; }

  void build_step(int index) {
    const PlannedNode& pn = graph_.nodes[size_t(index)];
    const formats::Node& node = *pn.node;
    Step st;
    st.op = node.op;
    st.inputs = pn.inputs;
    st.output = pn.output;
    const Value& in = graph_.value(pn.inputs[0]);
    st.elements = in.elements;
    for (size_t p = 0; p < parameters_.size(); ++p)
      if (parameters_[p].node == &node) (parameters_[p].is_bias ? st.bias : st.weight) = int(p);
    switch (node.op) {
      case OpType::Conv2D: case OpType::AvgPool: case OpType::MaxPool:
        st.in = dims(in.shape);
        st.out = dims(graph_.value(pn.output).shape);
        if (node.op == OpType::Conv2D) {  // im2col, its gradient, the weight gradient's lanes
          st.cs = conv_shape(st.in, node.window, st.out);
          scratch_per_thread_ = std::max(scratch_per_thread_, 2 * st.cs.taps * st.cs.positions +
                                                                  kConvBlock * (st.cs.taps + 1) * kLanes);
        }
        st.win = &node.window;
        st.cip = node.count_include_pad;
        break;
      case OpType::Dense:
        st.units = node.units;
        st.wt.resize(size_t(in.elements) * size_t(node.units));
        break;
      case OpType::ScaleShift:
        st.channels = in.shape.at(0);
        st.elements = in.elements / st.channels;
        break;
      default: break;
    }
    steps_.push_back(std::move(st));
  }

  void check_batch(const void* input, const uint8_t* labels, int n) const {
    if (n < 1 || n > max_batch_)
      throw std::invalid_argument(fmt::format("{}: batch of {} samples outside 1..{}", backend_, n, max_batch_));
    if (!input || !labels) throw std::invalid_argument(fmt::format("{}: no input or no labels", backend_));
    for (int s = 0; s < n; ++s)
      if (labels[s] >= classes_)
        throw std::invalid_argument(fmt::format("{}: label {} of sample {} is not one of the model's {} classes",
                                                backend_, int(labels[s]), s, classes_));
  }

  // (float(x) * scale - mean[c]) / std[c] in float32 (model-format-v1.md), then widened to T.
  void load_input(const void* input, int s) {
    T* x = act(graph_.input, s);
    const auto& spec = graph_.model->input;
    if (spec.dtype == formats::InputDType::Float32) {
      const float* src = static_cast<const float*>(input) + int64_t(s) * raw_elements_;
      for (int64_t i = 0; i < raw_elements_; ++i) x[i] = T(src[i]);
      return;
    }
    const formats::Preprocess& p = *spec.preprocess;
    const uint8_t* raw = static_cast<const uint8_t*>(input) + int64_t(s) * raw_elements_;
    const int oh = raw_dims_.h + p.pad_top + p.pad_bottom, ow = raw_dims_.w + p.pad_left + p.pad_right;
    for (int c = 0; c < raw_dims_.c; ++c)
      for (int y = 0; y < oh; ++y)
        for (int xx = 0; xx < ow; ++xx) {
          const int sy = y - p.pad_top, sx = xx - p.pad_left;
          float v = p.pad_value;
          if (sy >= 0 && sy < raw_dims_.h && sx >= 0 && sx < raw_dims_.w) {
            const float scaled = float(raw[(int64_t(c) * raw_dims_.h + sy) * raw_dims_.w + sx]) * p.scale;
            const float centred = scaled - p.mean[size_t(c)];
            v = centred / p.std[size_t(c)];
          }
          x[(int64_t(c) * oh + y) * ow + xx] = T(v);
        }
  }

  void forward(const void* input, int n) {
    for (Step& st : steps_)
      if (st.op == OpType::Dense) {
        const T* w = param(st.weight);
        const int64_t k = st.elements;
        for (int u = 0; u < st.units; ++u)
          for (int64_t i = 0; i < k; ++i) st.wt[size_t(i * st.units + u)] = w[u * k + i];
      }
#pragma omp parallel num_threads(threads_)
    {
#pragma omp for schedule(static)
      for (int s = 0; s < n; ++s) load_input(input, s);
      for (Step& st : steps_) {
        if (st.op == OpType::Flatten) continue;  // an alias: nothing to compute
        if (st.op == OpType::Dense) {
          const int blocks = (n + kDenseBlock - 1) / kDenseBlock;
#pragma omp for schedule(static)
          for (int b = 0; b < blocks; ++b)
            dense_forward(act(st.inputs[0]), st.elements, st.wt.data(), param(st.bias), st.units, b * kDenseBlock,
                          std::min(n, (b + 1) * kDenseBlock), act(st.output));
          continue;
        }
#pragma omp for schedule(static)
        for (int s = 0; s < n; ++s) forward_sample(st, s);
      }
    }
  }

  void forward_sample(const Step& st, int s) {
    const T* x = act(st.inputs[0], s);
    T* y = act(st.output, s);
    switch (st.op) {
      case OpType::Conv2D: {
        T* col = thread_scratch();
        im2col(x, st.cs, *st.win, col);
        conv2d_forward(col, st.cs, param(st.weight), param(st.bias), y);
        break;
      }
      case OpType::AvgPool: avgpool_forward(x, st.in, *st.win, st.cip, st.out, y); break;
      case OpType::MaxPool: maxpool_forward(x, st.in, *st.win, st.out, y); break;
      case OpType::Relu: case OpType::Tanh: case OpType::Sigmoid: activation_forward(st.op, x, st.elements, y); break;
      case OpType::Softmax: softmax_forward(x, st.elements, y); break;
      case OpType::Add: {
        const T* b = act(st.inputs[1], s);
        for (int64_t i = 0; i < st.elements; ++i) y[i] = x[i] + b[i];
        break;
      }
      case OpType::ScaleShift:
        scale_shift_forward(x, st.channels, st.elements, param(st.weight), param(st.bias), y);
        break;
      case OpType::Concat:
        for (int v : st.inputs) {
          const int64_t e = graph_.values[size_t(v)].elements;
          std::memcpy(y, act(v, s), size_t(e) * sizeof(T));
          y += e;
        }
        break;
      case OpType::Dense: case OpType::Flatten: break;  // whole-batch, or nothing to do
    }
  }

  BatchResult loss(const uint8_t* labels, int n, bool with_grad) {
    BatchResult r;
    std::vector<T>& losses = losses_;
    losses.resize(size_t(max_batch_));
    std::vector<uint8_t>& hit = hits_;
    hit.resize(size_t(max_batch_));
    const int prob = graph_.outputs[0];
    const T inv_n = T(1) / T(n);
#pragma omp parallel for schedule(static) num_threads(threads_)
    for (int s = 0; s < n; ++s) {
      const T* z = act(logits_, s);
      losses[size_t(s)] = softmax_cross_entropy(z, classes_, labels[s], inv_n, act(prob, s),
                                                with_grad ? grad(logits_, s) : nullptr);
      hit[size_t(s)] = int64_t(std::max_element(z, z + classes_) - z) == labels[s];
    }
    for (int s = 0; s < n; ++s) {  // in sample order, in double
      r.loss_sum += double(losses[size_t(s)]);
      r.correct += hit[size_t(s)];
    }
    return r;
  }

  void backward(int n) {
    // Every gradient buffer starts at zero except the logits', which the loss has just written.
    for (size_t v = 0; v < grad_.size(); ++v)
      if (!grad_[v].empty() && int(v) != root(logits_))
        std::fill(grad_[v].begin(), grad_[v].begin() + int64_t(n) * graph_.values[v].elements, T(0));
    std::fill(grads_.begin(), grads_.end(), T(0));
#pragma omp parallel num_threads(threads_)
    for (int i = int(steps_.size()) - 1; i >= 0; --i) {
      Step& st = steps_[size_t(i)];
      if (i == loss_node_ || !needs_[size_t(st.output)] || st.op == OpType::Flatten) continue;
      backward_step(st, n);
    }
  }

  // Called by every thread of the team; work is shared with `omp for` (each ends with a barrier).
  void backward_step(Step& st, int n) {
    const int x_id = st.inputs[0];
    const T* dy = grad(st.output);
    T* dx = needs_[size_t(x_id)] ? grad(x_id) : nullptr;
    switch (st.op) {
      case OpType::Conv2D: {
        const ConvShape& cs = st.cs;
        // Blocks of up to kConvBlock channels, as even as the thread count allows (LeNet's 6: 3 + 3).
        // The block size changes which thread sums a weight, never the order of its sum.
        const int size = std::clamp((cs.out.c + threads_ - 1) / threads_, 1, kConvBlock);
        const int blocks = (cs.out.c + size - 1) / size;
#pragma omp for schedule(static)
        for (int b = 0; b < blocks; ++b) {
          const int o0 = b * size, o1 = std::min(cs.out.c, o0 + size);
          T* col = thread_scratch();
          T* lanes = col + 2 * cs.taps * cs.positions;
          std::fill(lanes, lanes + kConvBlock * (cs.taps + 1) * kLanes, T(0));
          for (int s = 0; s < n; ++s) {
            im2col(act(x_id, s), cs, *st.win, col);
            conv2d_backward_params_add(col, grad(st.output, s), cs, o0, o1, lanes);
          }
          conv2d_reduce_lanes(lanes, cs, o0, o1, pgrad(st.weight), pgrad(st.bias));
        }
        if (dx) {
#pragma omp for schedule(static)
          for (int s = 0; s < n; ++s) {
            T* dcol = thread_scratch() + cs.taps * cs.positions;
            conv2d_backward_col(grad(st.output, s), cs, param(st.weight), dcol);
            col2im_add(dcol, cs, *st.win, grad(x_id, s));
          }
        }
        return;
      }
      case OpType::Dense: {
        const int blocks = (st.units + kDenseBlock - 1) / kDenseBlock;
#pragma omp for schedule(static)
        for (int b = 0; b < blocks; ++b)
          dense_backward_params(act(x_id), st.elements, dy, st.units, n, b * kDenseBlock,
                                std::min(st.units, (b + 1) * kDenseBlock), pgrad(st.weight), pgrad(st.bias));
        if (dx) {
          const int sblocks = (n + kDenseBlock - 1) / kDenseBlock;
#pragma omp for schedule(static)
          for (int b = 0; b < sblocks; ++b)
            dense_backward_input(dy, st.elements, param(st.weight), st.units, b * kDenseBlock,
                                 std::min(n, (b + 1) * kDenseBlock), dx);
        }
        return;
      }
      case OpType::ScaleShift: {
#pragma omp for schedule(static)
        for (int64_t c = 0; c < st.channels; ++c)
          scale_shift_backward_params(act(x_id), dy, st.channels, st.elements, n, c, pgrad(st.weight), pgrad(st.bias));
        if (dx) {
#pragma omp for schedule(static)
          for (int s = 0; s < n; ++s)
            scale_shift_backward_input(grad(st.output, s), st.channels, st.elements, param(st.weight), grad(x_id, s));
        }
        return;
      }
      default: break;
    }
    // Weight-free ops: per sample only.
#pragma omp for schedule(static)
    for (int s = 0; s < n; ++s) {
      const T* dys = grad(st.output, s);
      const T* x = act(x_id, s);
      T* dxs = dx ? grad(x_id, s) : nullptr;
      switch (st.op) {
        case OpType::AvgPool: if (dxs) avgpool_backward(dys, st.in, *st.win, st.cip, st.out, dxs); break;
        case OpType::MaxPool: if (dxs) maxpool_backward(x, dys, st.in, *st.win, st.out, dxs); break;
        case OpType::Relu: case OpType::Tanh: case OpType::Sigmoid:
          if (dxs) activation_backward(st.op, x, act(st.output, s), dys, st.elements, dxs);
          break;
        case OpType::Softmax: if (dxs) softmax_backward(act(st.output, s), dys, st.elements, dxs); break;
        case OpType::Add:
          // In input order; add(v, v) adds twice.
          for (int v : st.inputs)
            if (needs_[size_t(v)] && v != graph_.input) {
              T* d = grad(v, s);
              for (int64_t k = 0; k < st.elements; ++k) d[k] += dys[k];
            }
          break;
        case OpType::Concat: {
          const T* part = dys;
          for (int v : st.inputs) {
            const int64_t e = graph_.values[size_t(v)].elements;
            if (needs_[size_t(v)] && v != graph_.input) {
              T* d = grad(v, s);
              for (int64_t k = 0; k < e; ++k) d[k] += part[k];
            }
            part += e;
          }
          break;
        }
        default: break;
      }
    }
  }

  // Parameters of nodes the loss does not depend on have no gradient and are left alone, as
  // PyTorch's optimisers skip a parameter whose .grad is None.
  void update() {
    const int64_t total = parameter_count();
    std::vector<char>& active = active_;
    if (active.empty()) {
      active.assign(parameters_.size(), 0);
      for (size_t p = 0; p < parameters_.size(); ++p) {
        for (const Step& st : steps_)
          if ((st.weight == int(p) || st.bias == int(p)) && needs_[size_t(st.output)]) active[p] = 1;
      }
    }
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (total + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(threads_)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunk, end = std::min(total, begin + kChunk);
      for (size_t p = 0; p < parameters_.size(); ++p) {
        if (!active[p]) continue;
        const int64_t lo = std::max(begin, parameters_[p].offset);
        const int64_t hi = std::min(end, parameters_[p].offset + parameters_[p].elements);
        if (lo >= hi) continue;
        optimizer_update<T>(opt_, t_, hi - lo, params_.data() + lo, grads_.data() + lo, state1_.data() + lo,
                            state2_.empty() ? nullptr : state2_.data() + lo);
      }
    }
  }

  Graph graph_;
  std::string backend_;
  int max_batch_ = 0;
  int threads_ = 1;
  OptimizerOptions opt_;
  int64_t t_ = 0;
  std::vector<T> params_, grads_, state1_, state2_;
  std::vector<std::vector<T>> act_, grad_;  // per value; empty for aliases (and unneeded gradients)
  std::vector<bool> needs_;
  std::vector<Step> steps_;
  int logits_ = -1, loss_node_ = -1;
  int64_t classes_ = 0;
  int64_t raw_elements_ = 0;
  Dims raw_dims_;
  std::vector<T> losses_;
  std::vector<uint8_t> hits_;
  std::vector<char> active_;
  std::vector<T> scratch_;  // threads_ x scratch_per_thread_: conv im2col, its gradient, weight lanes
  int64_t scratch_per_thread_ = 0;
  std::string summary_;
};

}  // namespace
}  // namespace engine::train

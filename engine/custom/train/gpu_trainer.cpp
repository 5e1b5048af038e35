// GpuTrainer: planning (steps, folding) and the step's enqueue order on this backend's kernels;
// buffers, which gradients are needed and which kernel writes each gradient buffer first, CUDA-graph
// capture and replay are DeviceTrainer's (device_trainer.cpp). Plain C++ (fmt is fine here); the
// kernels are in the .cu files beside it.
#include "engine/custom/train/gpu_trainer.hpp"

#include "engine/gpu/train/data_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/custom/train/conv_train.hpp"
#include "engine/custom/train/dense_train.hpp"
#include "engine/gpu/train/pointwise_train.hpp"
#include "engine/custom/train/pool_train.hpp"
#include "engine/gpu/device.hpp"

namespace engine::custom::train {

using namespace gpu::train;  // the GPU trainers' shared part
namespace {

Pointwise pointwise_of(OpType op) {
  return op == OpType::Relu ? Pointwise::Relu : op == OpType::Tanh ? Pointwise::Tanh : Pointwise::Sigmoid;
}

}  // namespace

GpuTrainer::GpuTrainer(const Graph& graph, const TrainOptions& options, bool fold_activations)
    : DeviceTrainer(graph, options, "custom") {
  const size_t B = size_t(max_batch_);
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
  finish_plan();  // finds the gradient buffers to zero first

  summary_ = fmt::format(
      "custom: {} nodes, {} parameters, batches up to {}, float32 (fixed-order sums, no FMA contraction, no "
      "atomics), {}, CUDA graph per batch size, {} activations folded into conv2d/dense kernels",
      graph_.nodes.size(), parameter_count(), max_batch_, opt_.kind == OptimizerKind::Adam ? "Adam" : "SGD",
      std::count_if(steps_.begin(), steps_.end(), [](const Step& st) { return st.folded; }));
}

GpuTrainer::~GpuTrainer() {
  cudaSetDevice(device_);  // before this class's buffers are freed (DeviceTrainer's destructor sets it for its own)
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
  GradientWrites writes(*this, n, dry_run);  // zeroes the buffers read before written (not on a dry run)
  auto read = [&](int v) { writes.read(v); };
  auto write = [&](int v) { return writes.write(v); };  // whether the kernel must add to what is there
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
      case OpType::Add:  // in input order; add(v, v) adds twice (the second time onto the first)
        add_backward(st.inputs, dy, count, acc, writes, s);
        break;
      case OpType::Concat:
        concat_backward(st.output, st.inputs, dy, n, acc, writes, s);
        break;
      case OpType::Flatten: break;
    }
  }
}

void GpuTrainer::poison_more(cudaStream_t s) {
  for (const Step& st : steps_)
    if (st.argmax.size()) CUDA_CHECK(cudaMemsetAsync(st.argmax.data(), 0x7f, st.argmax.size() * sizeof(int), s));
}

std::unique_ptr<TrainExecutable> make_gpu_trainer(const Graph& graph, const TrainOptions& options) {
  return compile_on_devices(options, [&](const TrainOptions& o) { return std::make_unique<GpuTrainer>(graph, o); });
}

}  // namespace engine::custom::train

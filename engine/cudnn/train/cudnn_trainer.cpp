// CudnnTrainer: planning (one library op per node, the workspace, the handles bound to the
// trainer's stream) and the step's enqueue order.
#include "engine/cudnn/train/cudnn_trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "engine/cudnn/steps.hpp"
#include "engine/gpu/train/data_parallel.hpp"
#include "engine/gpu/train/pointwise_train.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::cudnn::train {
namespace {

namespace ct = engine::gpu::train;

// cuBLAS's recommended workspace on Hopper; fixed, because cuBLAS may pick another kernel (other
// bits) for another workspace size.
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

}  // namespace

CudnnTrainer::CudnnTrainer(const Graph& graph, const TrainOptions& options) : DeviceTrainer(graph, options, "cudnn") {
  warm_up_before_capture_ = true;  // library calls run once outside a capture first (device_trainer.hpp)
  capture_fallback_ = true;
  const std::string what = "cudnn trainer: binding the handles";
  CUDNN_CHECK_CTX(cudnnSetStream(cudnn_, stream()), what);
  // cublasSetStream resets the workspace to cuBLAS's default pool: set the stream first.
  CUBLAS_CHECK_CTX(cublasSetStream(cublas_, stream()), what);
  cublas_workspace_ = gpu::DeviceBuffer<unsigned char>(kCublasWorkspaceBytes, "cuBLAS workspace");
  CUBLAS_CHECK_CTX(cublasSetWorkspace(cublas_, cublas_workspace_.data(), cublas_workspace_.bytes()), what);
  // Explicitly: no TF32 tensor cores for fp32 GEMMs, no atomics (run-to-run reproducible sums),
  // scalars from host memory (captured by value into the graph: they are constants here).
  CUBLAS_CHECK_CTX(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH), what);
  CUBLAS_CHECK_CTX(cublasSetAtomicsMode(cublas_, CUBLAS_ATOMICS_NOT_ALLOWED), what);
  CUBLAS_CHECK_CTX(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST), what);

  size_t workspace = 0;
  int ones = max_batch_;
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const PlannedNode& pn = graph_.nodes[i];
    const formats::Node& node = *pn.node;
    const std::string label = node_label(node);
    Step st;
    st.op = node.op;
    st.inputs = pn.inputs;
    st.output = pn.output;
    const Value& in = graph_.value(pn.inputs[0]);
    const Value& out = graph_.value(pn.output);
    st.elements = in.elements;
    for (size_t p = 0; p < parameters_.size(); ++p)
      if (parameters_[p].node == &node) (parameters_[p].is_bias ? st.bias : st.weight) = int(p);
    const bool needs_dx = needs_[size_t(pn.inputs[0])] && pn.inputs[0] != graph_.input;
    const auto& w = node.window;
    switch (node.op) {
      case OpType::Conv2D: {
        ConvShape s;
        s.c = int(in.shape.at(0)), s.h = int(in.shape.at(1)), s.w = int(in.shape.at(2));
        s.k = int(out.shape.at(0)), s.oh = int(out.shape.at(1)), s.ow = int(out.shape.at(2));
        s.kh = w.kernel_h, s.kw = w.kernel_w, s.sh = w.stride_h, s.sw = w.stride_w;
        s.pt = w.pad_top, s.pb = w.pad_bottom, s.pl = w.pad_left, s.pr = w.pad_right;
        st.conv = std::make_unique<ConvTrain>(cudnn_, s, st.bias >= 0, needs_dx, max_batch_, label);
        workspace = std::max(workspace, st.conv->workspace_bytes());
        ones = std::max(ones, st.conv->ones_needed());
        break;
      }
      case OpType::AvgPool: case OpType::MaxPool: {
        PoolShape s;
        s.c = int(in.shape.at(0)), s.h = int(in.shape.at(1)), s.w = int(in.shape.at(2));
        s.oh = int(out.shape.at(1)), s.ow = int(out.shape.at(2));
        s.kh = w.kernel_h, s.kw = w.kernel_w, s.sh = w.stride_h, s.sw = w.stride_w;
        s.pt = w.pad_top, s.pb = w.pad_bottom, s.pl = w.pad_left, s.pr = w.pad_right;
        s.max = node.op == OpType::MaxPool;
        s.count_include_pad = node.count_include_pad;
        st.pool = std::make_unique<PoolTrain>(cudnn_, s, needs_dx, max_batch_, label);
        break;
      }
      case OpType::Dense: st.dense = std::make_unique<DenseTrain>(int(in.elements), node.units, label); break;
      case OpType::Relu:
        st.activation = std::make_unique<ActivationTrain>(CUDNN_ACTIVATION_RELU, false, in.elements, label);
        break;
      case OpType::Tanh:
        st.activation = std::make_unique<ActivationTrain>(CUDNN_ACTIVATION_TANH, false, in.elements, label);
        break;
      case OpType::Sigmoid:
        st.activation = std::make_unique<ActivationTrain>(CUDNN_ACTIVATION_SIGMOID, false, in.elements, label);
        break;
      case OpType::Softmax:
        if (int(i) != loss_node_)  // the loss's softmax is fused into the loss kernel
          st.activation = std::make_unique<ActivationTrain>(CUDNN_ACTIVATION_IDENTITY, true, in.elements, label);
        break;
      case OpType::ScaleShift:
        st.channels = in.shape.at(0);
        st.elements = in.elements / st.channels;
        break;
      default: break;
    }
    steps_.push_back(std::move(st));
  }
  workspace_ = gpu::DeviceBuffer<unsigned char>(std::max<size_t>(workspace, 1), "cuDNN convolution workspace");
  ones_ = gpu::DeviceBuffer<float>(size_t(ones), "ones (bias-gradient GEMV operand)");
  {
    const std::vector<float> host(size_t(ones), 1.0f);
    CUDA_CHECK(cudaMemcpy(ones_.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  // Padding borders were written with cudnnSetTensor on the stream: done before any step.
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  ctx_.cudnn = cudnn_;
  ctx_.cublas = cublas_;
  ctx_.workspace = workspace_.data();
  ctx_.workspace_bytes = workspace;
  ctx_.ones = ones_.data();
  finish_plan();

  std::string ops;
  for (const Step& st : steps_) {
    if (st.conv) ops += "\n  " + st.conv->summary();
    if (st.pool) ops += "\n  " + st.pool->summary();
    if (st.dense) ops += "\n  " + st.dense->summary();
  }
  summary_ = fmt::format(
      "cudnn: {} nodes, {} parameters, batches up to {}, float32 (deterministic cuDNN algorithms, FMA math; cuBLAS "
      "default math, no atomics), {}, CUDA graph per batch size, convolution workspace {} B{}",
      graph_.nodes.size(), parameter_count(), max_batch_, opt_.kind == OptimizerKind::Adam ? "Adam" : "SGD", workspace,
      ops);
}

CudnnTrainer::~CudnnTrainer() {
  cudaSetDevice(device_);  // before this class's handles and buffers are freed
}

void CudnnTrainer::prepare(int n) {
  if (n == prepared_) return;
  for (Step& st : steps_) {
    if (st.conv) st.conv->set_batch(n);
    if (st.pool) st.pool->set_batch(n);
    if (st.dense) st.dense->set_batch(n);
    if (st.activation) st.activation->set_batch(n);
  }
  prepared_ = n;
}

void CudnnTrainer::enqueue_forward(int n) {
  cudaStream_t s = stream();
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& st = steps_[i];
    if (int(i) == loss_node_) continue;  // the loss kernel writes the probabilities
    const float* x = act(st.inputs[0]);
    float* y = act(st.output);
    const long long count = (long long)n * st.elements;
    switch (st.op) {
      case OpType::Conv2D: st.conv->forward(ctx_, x, param(st.weight), param(st.bias), y); break;
      case OpType::AvgPool: case OpType::MaxPool: st.pool->forward(ctx_, x, y); break;
      case OpType::Dense: st.dense->forward(ctx_, x, param(st.weight), param(st.bias), y); break;
      case OpType::Relu: case OpType::Tanh: case OpType::Sigmoid: case OpType::Softmax:
        st.activation->forward(ctx_, x, y);
        break;
      case OpType::Add: ct::add_forward(x, act(st.inputs[1]), y, count, s); break;
      case OpType::ScaleShift:
        ct::scale_shift_forward(x, param(st.weight), param(st.bias), y, n, st.channels, st.elements, s);
        break;
      case OpType::Concat: {
        const int64_t total = graph_.value(st.output).elements;
        int64_t offset = 0;
        for (int v : st.inputs) {
          const int64_t e = graph_.values[size_t(v)].elements;
          ct::concat_forward(act(v), y, n, e, offset, total, s);
          offset += e;
        }
        break;
      }
      case OpType::Flatten: break;  // an alias
    }
  }
}

// host_trainer.hpp's order (nodes backwards); first writer of a gradient buffer overwrites it
// (beta = 0), later writers add (beta = 1).
void CudnnTrainer::enqueue_backward(int n, bool dry_run) {
  cudaStream_t s = stream();
  GradientWrites writes(*this, n, dry_run);
  for (int i = int(steps_.size()) - 1; i >= 0; --i) {
    Step& st = steps_[size_t(i)];
    if (i == loss_node_ || !needs_[size_t(st.output)] || st.op == OpType::Flatten) continue;
    writes.read(st.output);
    const int x_id = st.inputs[0];
    const float* dy = grad(st.output);
    float* dx = needs_[size_t(x_id)] ? grad(x_id) : nullptr;
    const bool acc = dx ? writes.write(x_id) : false;
    if (dry_run) {
      for (size_t k = 1; k < st.inputs.size(); ++k)
        if (needs_[size_t(st.inputs[k])] && grad(st.inputs[k])) writes.write(st.inputs[k]);
      continue;
    }
    const long long count = (long long)n * st.elements;
    switch (st.op) {
      case OpType::Conv2D:
        st.conv->backward(ctx_, act(x_id), dy, param(st.weight), pgrad(st.weight), pgrad(st.bias), dx, acc);
        break;
      case OpType::Dense:
        st.dense->backward(ctx_, act(x_id), dy, param(st.weight), pgrad(st.weight), pgrad(st.bias), dx, acc);
        break;
      case OpType::ScaleShift:
        ct::scale_shift_backward_params(act(x_id), dy, pgrad(st.weight), pgrad(st.bias), n, st.channels, st.elements, s);
        if (dx) ct::scale_shift_backward_input(dy, param(st.weight), dx, n, st.channels, st.elements, acc, s);
        break;
      case OpType::AvgPool: case OpType::MaxPool:
        if (dx) st.pool->backward(ctx_, act(x_id), act(st.output), dy, dx, acc);
        break;
      case OpType::Relu: case OpType::Tanh: case OpType::Sigmoid: case OpType::Softmax:
        if (dx) st.activation->backward(ctx_, act(x_id), act(st.output), dy, dx, acc);
        break;
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

std::unique_ptr<TrainExecutable> make_cudnn_trainer(const Graph& graph, const TrainOptions& options) {
  return gpu::train::compile_on_devices(options,
                                           [&](const TrainOptions& o) { return std::make_unique<CudnnTrainer>(graph, o); });
}

}  // namespace engine::cudnn::train

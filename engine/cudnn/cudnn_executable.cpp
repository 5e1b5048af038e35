#include "engine/cudnn/cudnn_executable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/gpu/convert.hpp"

namespace engine::cudnn {
namespace {

// cuBLAS's recommended workspace on Hopper; set explicitly so cuBLAS never allocates on its own and
// its kernel choice (hence its rounding) does not depend on what a default pool had free.
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;
// The most workspace one convolution algorithm may use (also bounded by a quarter of free memory).
constexpr size_t kConvWorkspaceLimit = size_t(256) << 20;

}  // namespace

CudnnExecutable::CudnnExecutable(const Graph& graph, const CompileOptions& options,
                                 const CudnnOptions& cudnn_options)
    : gpu::GpuExecutable(graph, options),
      cudnn_options_(cudnn_options),
      cublas_workspace_(kCublasWorkspaceBytes, "cuBLAS workspace") {
  const std::string what = fmt::format("cudnn backend, model '{}'", graph_.model->name);
  // The base class poisons the arena with cudaMemset on the legacy default stream, which does not
  // order with our non-blocking stream: finish it before anything runs on ours.
  CUDA_CHECK_CTX(cudaDeviceSynchronize(), what);
  CUDNN_CHECK_CTX(cudnnSetStream(cudnn_, stream()), what);
  // cublasSetStream resets the workspace to cuBLAS's default pool: set the stream first.
  CUBLAS_CHECK_CTX(cublasSetStream(cublas_, stream()), what);
  CUBLAS_CHECK_CTX(cublasSetWorkspace(cublas_, cublas_workspace_.data(), cublas_workspace_.bytes()), what);
  CUBLAS_CHECK_CTX(cublasSetMathMode(cublas_, options_.precision == Precision::TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                                     : CUBLAS_DEFAULT_MATH),
                   what);
  CUBLAS_CHECK_CTX(cublasSetAtomicsMode(cublas_, options_.deterministic ? CUBLAS_ATOMICS_NOT_ALLOWED
                                                                        : CUBLAS_ATOMICS_ALLOWED),
                   what);

  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK_CTX(cudaMemGetInfo(&free_bytes, &total_bytes), what);
  BuildContext ctx;
  ctx.cudnn = cudnn_;
  ctx.cublas = cublas_;
  ctx.cublas_lt = cublas_lt_;
  ctx.options = options_;
  ctx.cudnn_options = cudnn_options_;
  ctx.max_batch = max_batch_;
  ctx.workspace_limit = std::min(kConvWorkspaceLimit, free_bytes / 4);
  ctx.stream = stream();
  ctx.storage = choose_storage();
  storage_ = ctx.storage;
  build_steps(ctx);

  size_t workspace = 0;
  for (const auto& step : steps_) workspace = std::max(workspace, step->workspace_bytes());
  workspace_ = gpu::DeviceBuffer<unsigned char>(workspace, "cuDNN convolution workspace");
  run_ctx_ = RunContext{cudnn_, cublas_, cublas_lt_, workspace_.data(), workspace_.bytes(), stream()};
  choose_tactics();

  const Precision p = options_.precision;
  summary_.push_back(fmt::format("cudnn: cuDNN {} (C API), cuBLAS {}, {} math, {} {} storage, {}, max batch {}",
                                 cudnn_version(), cublas_version(),
                                 p == Precision::FP32   ? "fp32 (no TF32)"
                                 : p == Precision::TF32 ? "TF32 tensor-core"
                                 : p == Precision::INT8 ? "int8 conv2d/dense (int32 sums, calibrated per-tensor input "
                                                          "scales, per-channel weight scales), fp32 elsewhere"
                                                        : fmt::format("{} tensor-core (fp32 sums)", precision_name(p)),
                                 storage_.type_name(), storage_.layout_name(),
                                 options_.deterministic ? "deterministic algorithms (heuristic choice)"
                                                        : "fastest measured algorithms (nondeterministic)",
                                 max_batch_));
  for (const auto& step : steps_) summary_.push_back(step->summary());
  for (const auto& note : fusion_notes_) summary_.push_back("fusion: " + note);
  if (!storage_note_.empty()) summary_.push_back("storage: " + storage_note_);
  summary_.push_back(fmt::format("workspace: {} for convolutions (largest layer, every batch size), {} for cuBLAS",
                                 format_bytes(workspace_.bytes()), format_bytes(cublas_workspace_.bytes())));

  // Run every step once for the largest and the smallest batch: a configuration cuDNN rejects fails
  // here, at compile time, and lazily loaded library kernels are loaded before the first timed run.
  forward(max_batch_);
  forward(1);
  synchronize();
}

CudnnExecutable::~CudnnExecutable() {
  // Work still queued may use the buffers and handles about to be freed.
  cudaStreamSynchronize(stream());
}

bool CudnnExecutable::blocks_overlap(int value_a, int value_b) const {
  const Value& a = graph_.value(value_a);
  const Value& b = graph_.value(value_b);
  const int64_t a0 = a.arena_offset, a1 = a.arena_offset + a.elements;
  const int64_t b0 = b.arena_offset, b1 = b.arena_offset + b.elements;
  return a0 < b1 && b0 < a1;
}

// conv → relu and dense → relu fusion (called "conv" below) needs a block the convolution can write
// the relu's value to while it reads its own input. Two candidates:
//  1. the relu's own block, when it does not overlap the convolution's input (the planner may have
//     given the relu the input's block, which dies at the convolution);
//  2. the convolution's block (which never overlaps its input), when it stays unused until the relu's
//     value (and any flatten alias of it) is last read: the planner frees it after the relu, so no
//     value written by a later node up to that last read may overlap it. The relu's value then lives
//     there: value_ptr_ sends its readers (and its aliases' readers) to the moved block. Not for graph
//     outputs, whose blocks the download reads.
//  3. otherwise a block of the backend's own (below).
void* CudnnExecutable::fused_relu_destination(size_t i) {
  const auto& nodes = graph_.nodes;
  if (i + 1 >= nodes.size()) return nullptr;
  const PlannedNode& conv = nodes[i];
  const PlannedNode& relu = nodes[i + 1];
  const Value& conv_out = graph_.value(conv.output);
  if (relu.node->op != OpType::Relu || relu.inputs.at(0) != conv.output || conv_out.is_output ||
      conv_out.consumers != std::vector<int>{int(i + 1)})
    return nullptr;
  if (!blocks_overlap(relu.output, conv.inputs.at(0))) return value_ptr(relu.output);

  std::vector<int> moved{relu.output};
  int last_read = graph_.value(relu.output).last_use;
  for (size_t id = 0; id < graph_.values.size(); ++id) {
    const Value& v = graph_.values[id];
    if (v.alias_of == relu.output) {
      moved.push_back(int(id));
      last_read = std::max(last_read, v.last_use);
    }
  }
  for (int id : moved)
    if (graph_.value(id).is_output) return nullptr;
  bool conv_block_free = true;
  for (size_t j = i + 2; j < nodes.size() && int(j) <= last_read; ++j) {
    const Value& written = graph_.value(nodes[j].output);
    if (written.alias_of < 0 && blocks_overlap(nodes[j].output, conv.output)) conv_block_free = false;
  }
  void* block = nullptr;
  if (conv_block_free) {
    block = value_ptr(conv.output);
    fusion_notes_.push_back(fmt::format("relu '{}' lives in '{}''s block (its own overlaps that node's input)",
                                        relu.node->name, conv.node->name));
  } else {
    // 3. a block of its own, allocated here (compile time): the fusion saves a pass over the tensor
    // for the price of one more [max_batch, elements] buffer.
    const Value& r = graph_.value(relu.output);
    private_blocks_.emplace_back(size_t(r.elements) * size_t(max_batch_) * storage_.bytes(),
                                 fmt::format("block of relu '{}' (fused into '{}')", relu.node->name,
                                             conv.node->name));
    block = private_blocks_.back().data();
    // NaN, as the arena: an element the fused convolution does not write shows in the output.
    CUDA_CHECK_CTX(cudaMemsetAsync(block, 0xFF, private_blocks_.back().bytes(), stream()), node_label(*conv.node));
    fusion_notes_.push_back(fmt::format("relu '{}' lives in a block of its own, {} (its arena block overlaps "
                                        "'{}''s input, whose own block is reused before its last read)",
                                        relu.node->name, format_bytes(private_blocks_.back().bytes()),
                                        conv.node->name));
  }
  for (int id : moved) value_ptr_[size_t(id)] = block;
  return block;
}

void CudnnExecutable::build_steps(const BuildContext& ctx) {
  const auto& nodes = graph_.nodes;
  value_ptr_.resize(graph_.values.size());
  for (size_t id = 0; id < graph_.values.size(); ++id) value_ptr_[id] = device_value(int(id));
  std::vector<std::unique_ptr<Step>> exits;
  if (!storage_.fp32() || storage_.nhwc()) add_edge_conversions(exits);
  std::vector<bool> done(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (done[i]) continue;
    const PlannedNode& planned = nodes[i];
    const formats::Node& node = *planned.node;
    const Value& in0 = graph_.value(planned.inputs.at(0));
    const void* x = value_ptr(planned.inputs.at(0));
    void* y = value_ptr(planned.output);
    if (options_.precision == Precision::INT8 && (node.op == OpType::Conv2D || node.op == OpType::Dense)) {
      // Integer conv2d / dense; a following relu that only it reads is folded into its dequantization,
      // which writes the relu's block (the step reads its own int8 and int32 copies by then, so the
      // block may be any, even one overlapping the input).
      std::string relu_name;
      if (i + 1 < nodes.size()) {
        const PlannedNode& next = nodes[i + 1];
        const Value& out = graph_.value(planned.output);
        if (next.node->op == OpType::Relu && next.inputs.at(0) == planned.output && !out.is_output &&
            out.consumers == std::vector<int>{int(i + 1)}) {
          relu_name = next.node->name;
          y = value_ptr(next.output);
          done[i + 1] = true;
        }
      }
      const Int8Input input = int8_input(planned.inputs.at(0), node);
      if (node.op == OpType::Conv2D)
        steps_.push_back(make_int8_conv_step(ctx, node, in0.shape, x, y, input, relu_name));
      else
        steps_.push_back(make_int8_dense_step(ctx, node, graph_.value(graph_.storage_root(planned.inputs.at(0))).shape,
                                              x, y, input, relu_name));
      continue;
    }
    switch (node.op) {
      case OpType::Conv2D: {
        if (const auto refusal = space_to_depth_refusal(ctx, node, in0.shape); !refusal) {
          // A following activation that is the conv's only reader runs in the depth-to-space pass:
          // the conv writes its own scratch, never this block, so the activation's block may be any.
          std::optional<OpType> act;
          std::string act_name;
          if (i + 1 < nodes.size()) {
            const PlannedNode& next = nodes[i + 1];
            const Value& conv_out = graph_.value(planned.output);
            const OpType op = next.node->op;
            if ((op == OpType::Relu || op == OpType::Tanh || op == OpType::Sigmoid) &&
                next.inputs.at(0) == planned.output && !conv_out.is_output &&
                conv_out.consumers == std::vector<int>{int(i + 1)}) {
              act = op;
              act_name = next.node->name;
              y = value_ptr(next.output);
              done[i + 1] = true;
            }
          }
          steps_.push_back(make_space_to_depth_conv_step(ctx, node, in0.shape, x, y, act, act_name));
          break;
        } else {
          fusion_notes_.push_back(fmt::format("{}: direct convolution (not space-to-depth: {})", node_label(node), *refusal));
        }
        ConvFusion fusion;
        std::string fused_name;
        if (void* destination = fused_relu_destination(i)) {
          fusion.relu = true;
          fused_name = nodes[i + 1].node->name;
          y = destination;
          done[i + 1] = true;
        }
        steps_.push_back(make_conv_step(ctx, node, in0.shape, x, y, fusion, fused_name));
        break;
      }
      case OpType::AvgPool:
      case OpType::MaxPool:
        steps_.push_back(make_pool_step(ctx, node, in0.shape, x, y));
        break;
      case OpType::Relu:
      case OpType::Tanh:
      case OpType::Sigmoid:
        steps_.push_back(make_activation_step(ctx, node, in0.elements, x, y));
        break;
      case OpType::Flatten:
        break;  // an alias: it shares its source's storage (value_ptr_ follows a moved source)
      case OpType::Dense: {
        const formats::Node* fused = nullptr;
        if (void* destination = fused_relu_destination(i)) {
          fused = nodes[i + 1].node;
          y = destination;
          done[i + 1] = true;
        }
        steps_.push_back(make_dense_step(ctx, node, graph_.value(graph_.storage_root(planned.inputs.at(0))).shape, x, y,
                                         fused));
        break;
      }
      case OpType::Softmax:
        steps_.push_back(make_softmax_step(ctx, node, in0.elements, x, y));
        break;
      case OpType::Add:
        steps_.push_back(make_add_step(ctx, node, in0.elements, x, value_ptr(planned.inputs.at(1)), y));
        break;
      case OpType::ScaleShift:
        steps_.push_back(make_scale_shift_step(ctx, node, in0.shape, x, y));
        break;
      case OpType::Concat: {
        std::vector<ConcatInput> inputs;
        for (int input : planned.inputs) {
          const Shape& stored = graph_.value(graph_.storage_root(input)).shape;
          const int64_t pixels = storage_.nhwc_for(stored) ? stored[1] * stored[2] : 1;
          inputs.push_back(ConcatInput{value_ptr(input), graph_.value(input).elements, pixels});
        }
        steps_.push_back(make_concat_step(ctx, node, std::move(inputs), graph_.value(planned.output).elements, y));
        break;
      }
      default:
        throw std::runtime_error(node_label(node) + ": op not implemented by the cudnn backend");
    }
  }
  for (auto& step : exits) steps_.push_back(std::move(step));
}

// int8: the calibrated range of a conv2d's / dense's input as the reference's emulation finds it (the
// value's own name, else the value it aliases: a flatten's source), as the scale s = range / 127.
Int8Input CudnnExecutable::int8_input(int value, const formats::Node& reader) const {
  const formats::Model& model = *graph_.model;
  for (int v = value; v >= 0; v = graph_.value(v).alias_of)
    for (const auto& [name, r] : model.calibration->ranges)
      if (name == graph_.value(v).name) return Int8Input{float(r) / 127.0f, r, name};
  throw std::invalid_argument(fmt::format("model '{}': its calibration has no range for '{}', the input of a {} node: "
                                          "calibrate the model again (engine calibrate)",
                                          model.name, graph_.value(value).name, formats::op_name(reader.op)));
}

// fp32 NCHW unless asked otherwise: the exact path. fp16 / bf16 (and int8's fp32 values) store NHWC,
// the layout cuDNN's tensor-core convolutions read without a transposition pass, unless a flatten of
// a [C, H, W] value (C, H * W > 1) feeds something other than a dense layer: only a dense layer can
// take the (h, w, c) order, by permuting its weight. CudnnOptions::layout overrides the choice.
Storage CudnnExecutable::choose_storage() {
  Storage s;
  const Precision p = options_.precision;
  s.dtype = p == Precision::FP16 ? CUDNN_DATA_HALF : p == Precision::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  // int8 keeps fp32 values, NHWC: the layout of cuDNN's int8 convolutions (its quantization kernel
  // reads NCHW too, when a flatten forces it below).
  bool nhwc = !s.fp32() || p == Precision::INT8;
  if (cudnn_options_.layout == CudnnOptions::Layout::Nhwc) nhwc = true;
  if (cudnn_options_.layout == CudnnOptions::Layout::Nchw) nhwc = false;
  if (nhwc) {
    for (size_t id = 0; id < graph_.values.size() && nhwc; ++id) {
      const Value& v = graph_.values[id];
      if (v.alias_of < 0) continue;
      const Shape& src = graph_.value(graph_.storage_root(int(id))).shape;
      if (src.size() != 3 || src[0] == 1 || src[1] * src[2] == 1) continue;
      for (int c : v.consumers)
        if (graph_.nodes[size_t(c)].node->op != OpType::Dense) {
          storage_note_ = fmt::format("NCHW: '{}' (a flatten of a [{}, {}, {}] value) feeds {}, which cannot take "
                                      "NHWC order",
                                      v.name, src[0], src[1], src[2], node_label(*graph_.nodes[size_t(c)].node));
          nhwc = false;
          break;
        }
    }
  }
  s.format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  return s;
}

namespace {

// The float32 NCHW graph input into the storage's type and layout, or a graph output back.
class EdgeConversionStep final : public Step {
 public:
  EdgeConversionStep(std::string label, const Storage& storage, const Shape& stored_shape, bool into_storage,
                     const void* from, void* to, int max_batch)
      : Step(std::move(label)), into_(into_storage), from_(from), to_(to) {
    type_ = storage.dtype == CUDNN_DATA_HALF       ? gpu::StorageType::F16
            : storage.dtype == CUDNN_DATA_BFLOAT16 ? gpu::StorageType::BF16
                                                   : gpu::StorageType::F32;
    nhwc_ = storage.nhwc_for(stored_shape);
    shape_.channels = nhwc_ ? int(stored_shape[0]) : int(formats::element_count(stored_shape));
    shape_.pixels = nhwc_ ? int(stored_shape[1] * stored_shape[2]) : 1;
    const std::string stored = fmt::format("{} {}", storage.type_name(), nhwc_ ? "NHWC" : "NCHW");
    what_ = into_ ? "float32 NCHW -> " + stored : stored + " -> float32 NCHW";
    set_batch(max_batch);
  }
  void set_batch(int n) override { shape_.n = n; }
  void enqueue(const RunContext& ctx) override {
    if (into_)
      gpu::convert_from_f32(static_cast<const float*>(from_), to_, type_, nhwc_, shape_, ctx.stream);
    else
      gpu::convert_to_f32(from_, type_, nhwc_, static_cast<float*>(to_), shape_, ctx.stream);
  }
  std::string summary() const override { return fmt::format("{}: conversion {} (engine/gpu/convert.cu)", label_, what_); }

 private:
  bool into_;
  const void* from_;
  void* to_;
  gpu::StorageType type_ = gpu::StorageType::F32;
  bool nhwc_ = false;
  gpu::ValueShape shape_;
  std::string what_;
};

}  // namespace

// The graph input and every graph output get a block of their own in the storage's type (the
// arena's blocks stay float32 NCHW for the upload, the preprocessing and the download); steps read
// and write those, and conversion steps run first and last.
void CudnnExecutable::add_edge_conversions(std::vector<std::unique_ptr<Step>>& exits) {
  auto own_block = [&](int r, const std::string& what) {
    const Value& v = graph_.value(r);
    private_blocks_.emplace_back(size_t(v.elements) * size_t(max_batch_) * storage_.bytes(), what);
    void* block = private_blocks_.back().data();
    CUDA_CHECK_CTX(cudaMemsetAsync(block, 0xFF, private_blocks_.back().bytes(), stream()), what);
    for (size_t id = 0; id < graph_.values.size(); ++id)
      if (graph_.storage_root(int(id)) == r) value_ptr_[id] = block;
    return block;
  };
  const int in = graph_.storage_root(graph_.input);
  void* in_block = own_block(in, fmt::format("input '{}' in {} {}", graph_.value(in).name, storage_.type_name(),
                                             storage_.layout_name()));
  steps_.push_back(std::make_unique<EdgeConversionStep>(fmt::format("input '{}'", graph_.value(in).name), storage_,
                                                        graph_.value(in).shape, true, device_value(in), in_block,
                                                        max_batch_));
  std::vector<int> done{in};
  for (int out : graph_.outputs) {
    const int r = graph_.storage_root(out);
    void* block = value_ptr_[size_t(r)];
    if (std::find(done.begin(), done.end(), r) == done.end()) {
      block = own_block(r, fmt::format("output '{}' in {} {}", graph_.value(r).name, storage_.type_name(),
                                       storage_.layout_name()));
      done.push_back(r);
    }
    exits.push_back(std::make_unique<EdgeConversionStep>(fmt::format("output '{}'", graph_.value(out).name), storage_,
                                                         graph_.value(r).shape, false, block, device_value(out),
                                                         max_batch_));
  }
}

namespace {

// Runs `enqueue` once (warm-up: loads library kernels), then `runs` times between two events on
// `stream`; the mean time of one run in ms.
template <typename F>
float time_enqueues(cudaStream_t stream, const std::string& what, int runs, F&& enqueue) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK_CTX(cudaEventCreate(&start), what);
  struct Owned {
    cudaEvent_t* e;
    ~Owned() {
      if (*e) cudaEventDestroy(*e);
    }
  } own_start{&start}, own_stop{&stop};
  CUDA_CHECK_CTX(cudaEventCreate(&stop), what);
  enqueue();
  CUDA_CHECK_CTX(cudaEventRecord(start, stream), what);
  for (int i = 0; i < runs; ++i) enqueue();
  CUDA_CHECK_CTX(cudaEventRecord(stop, stream), what);
  CUDA_CHECK_CTX(cudaEventSynchronize(stop), what);
  float ms = 0;
  CUDA_CHECK_CTX(cudaEventElapsedTime(&ms, start, stop), what);
  return ms / float(runs);
}

}  // namespace

float CudnnExecutable::time_forward_ms() {
  constexpr int kRuns = 3;
  return time_enqueues(stream(), fmt::format("cudnn backend, model '{}': timing a forward pass", graph_.model->name),
                       kRuns, [&] { forward(max_batch_); });
}

void CudnnExecutable::add_plan_note(const std::string& line) {
  summary_.insert(summary_.empty() ? summary_.end() : summary_.begin() + 1, line);
}

void CudnnExecutable::choose_tactics() {
  const std::string forced = int8_conv_name(cudnn_options_.int8_conv);
  for (auto& step : steps_) {
    const int count = step->tactics();
    if (count < 2) continue;
    step->set_batch(max_batch_);
    std::vector<float> ms(size_t(count), 0.0f);
    int best = 0;
    for (int t = 0; t < count; ++t) {
      step->use_tactic(t);
      constexpr int kRuns = 3;
      ms[size_t(t)] = time_enqueues(stream(), step->label() + ": timing tactic " + step->tactic_name(t), kRuns,
                                    [&] { step->enqueue(run_ctx_); });
      if (ms[size_t(t)] < ms[size_t(best)]) best = t;
    }
    if (!forced.empty()) {
      int named = -1;
      for (int t = 0; t < count; ++t)
        if (step->tactic_name(t) == forced) named = t;
      if (named < 0) {
        std::string names;
        for (int t = 0; t < count; ++t) names += (t ? ", " : "") + step->tactic_name(t);
        throw std::invalid_argument(fmt::format("int8 convolution tactic '{}': {} has no tactic of that name ({})",
                                                forced, step->label(), names));
      }
      best = named;
    }
    step->use_tactic(best);
    step->keep_tactic(ms);
  }
  batch_ = -1;  // the timed steps describe max_batch, the others what they were built for
}

void CudnnExecutable::forward(int n) {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("cudnn backend: batch of {} outside 1..{}", n, max_batch_));
  if (n != batch_) {
    batch_ = -1;  // a failure half-way leaves the descriptors in no known state
    for (auto& step : steps_) step->set_batch(n);
    batch_ = n;
  }
  for (auto& step : steps_) step->enqueue(run_ctx_);
}

std::string CudnnExecutable::plan_summary() const {
  std::string out;
  for (const auto& line : summary_) out += line + "\n";
  return out;
}

}  // namespace engine::cudnn

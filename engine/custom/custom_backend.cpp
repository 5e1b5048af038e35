// The "custom" backend: the backend class, compile-time planning (weights upload, fusion, launch
// configurations) and forward(). Kernels and their launchers live in the .cu files beside it, one
// per op family; this file is plain C++ (fmt is fine here, not in .cu files).
//
// fp32 paths. The fused path (fused/: one conv-chain and one dense-chain kernel) runs every graph
// that qualifies (fused/fused_plan.hpp states the rule and the limits) unless general_path_wins()
// below sends it to the general path (from the model's shapes). Every other graph runs the
// general path (general/: implicit-GEMM conv2d and dense kernels with fused epilogues, fp32
// accumulation in a fixed order). CompileOptions::fuse off (--no-fuse) runs the per-node kernels
// below, which accumulate in double in the CPU reference's order: the GPU oracle. --precision fp16|bf16|int8: the tensor-core chain
// (fused/tc_chain*) for the LeNet-5 family; fp16/bf16 chains of dense layers the tensor-core general
// path (tc_general/: 16-bit activations between GEMMs); otherwise the per-node kernels with conv2d
// and dense on tensor cores (tc_gemm.hpp) and every other op in fp32. A reduced precision is a permission: the
// fastest precision it allows at the planned batch runs (compile(); engine/gpu/precision_choice.hpp).
//
// Per-node fusion rule: an activation node (relu/tanh/sigmoid) is folded into the epilogue of the
// conv2d or dense node that produces its input when that value is the activation's only reader
// (one consumer) and not a graph output. The core planner (engine::fuse_groups) lays the arena out
// for it: the pair runs at the producer's step, the producer's value is never materialised, and the
// fused kernel writes act(result) into the activation's own block.
#include "engine/custom/custom_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "engine/custom/conv2d.hpp"
#include "engine/custom/dense.hpp"
#include "engine/custom/elementwise.hpp"
#include "engine/custom/fused/fused_executable.hpp"
#include "engine/custom/fused/fused_plan.hpp"
#include "engine/custom/fused/tc_chain_executable.hpp"
#include "engine/custom/fused/tc_chain_plan.hpp"
#include "engine/custom/general/general_executable.hpp"
#include "engine/custom/node_shapes.hpp"
#include "engine/custom/pooling.hpp"
#include "engine/custom/softmax.hpp"
#include "engine/custom/tc_gemm.hpp"
#include "engine/custom/tc_general/tc_general_executable.hpp"
#include "engine/custom/tc_gemm_weights.hpp"
#include "engine/custom/train/gpu_trainer.hpp"
#include "engine/gpu/device.hpp"
#include "engine/gpu/device_executable.hpp"
#include "engine/gpu/gpu_executable.hpp"
#include "engine/gpu/precision_choice.hpp"

namespace engine::custom {
namespace {

// Where the general path beats the fused chain (between the model zoo's chains where each wins,
// docs/design/custom-general.md): multiply-adds per sample of a chain's conv layers, and of a
// dense-only chain's layers (mlp-128, 0.10 M, runs faster on the general path at large batches and
// level at batch 1; the smaller dense chains keep the one fused kernel).
constexpr int64_t kFusedChainMaxConvMacs = 8'000'000;
constexpr int64_t kFusedDenseChainMaxMacs = 100'000;

// Per-sample arena intervals [offset, offset + elements): two values' [B, elements] blocks overlap
// exactly when these do (both scale by the same B).
bool blocks_overlap(const Value& a, const Value& b) {
  return a.arena_offset < b.arena_offset + b.elements && b.arena_offset < a.arena_offset + a.elements;
}

DeviceLimits read_device_limits() {
  DeviceLimits limits;
  int device = 0, sms = 0, shared = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlock, device));
  limits.multiprocessors = sms > 0 ? sms : 1;
  // The default per-block limit (48 KiB) needs no cudaFuncSetAttribute.
  limits.shared_per_block = shared > 0 ? size_t(shared) : size_t(48 * 1024);
  return limits;
}

fused::DeviceShape read_device_shape() {
  fused::DeviceShape shape;
  int device = 0, sms = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  shape.multiprocessors = sms > 0 ? sms : 1;
  shape.shared_optin_bytes = optin > 0 ? optin : 48 * 1024;
  return shape;
}

std::string device_description() {
  try {
    return gpu::describe(gpu::current_device());
  } catch (const std::exception& e) {
    return fmt::format("no GPU ({})", e.what());
  }
}

int as_int(int64_t v) { return int(v); }  // per-sample sizes are < 2^31 (model-format-v1.md)

// Which activation node is folded into which producer, as fusion groups for the core planner.
struct FusionPlan {
  Graph graph;                  // fused: groups set, arena laid out for them
  std::vector<int> fused_into;  // per node: index of the activation folded into it, or -1
  std::vector<bool> absorbed;   // per node: an activation run by its producer's kernel
  int dropped_values = 0;       // producer values never materialised
  int64_t core_arena_floats = 0;  // the unfused plan's arena size, for the summary
};

FusionPlan plan_fusion(const Graph& graph) {
  const int count = int(graph.nodes.size());
  std::vector<int> fused_into(size_t(count), -1);
  std::vector<bool> absorbed(size_t(count), false);
  std::vector<FusionGroup> groups;
  for (int i = 0; i < count; ++i) {
    const OpType op = graph.nodes[size_t(i)].node->op;
    if (op != OpType::Conv2D && op != OpType::Dense) continue;
    const Value& produced = graph.value(graph.nodes[size_t(i)].output);
    if (produced.is_output || produced.consumers.size() != 1) continue;
    const int j = produced.consumers[0];
    const auto act = activation_of(graph.nodes[size_t(j)].node->op);
    if (j <= i || !act) continue;
    fused_into[size_t(i)] = j;
    absorbed[size_t(j)] = true;
    groups.push_back(FusionGroup{{i, j}, fmt::format("{}+{}", formats::op_name(op), activation_name(*act))});
  }
  const int dropped = int(groups.size());
  return FusionPlan{groups.empty() ? graph : fuse_groups(graph, std::move(groups)), std::move(fused_into),
                    std::move(absorbed), dropped, graph.arena_floats_per_sample};
}

struct ConvStep { Conv2dArgs args; Conv2dLaunch launch; };
struct PoolStep { Pool2dArgs args; PoolLaunch launch; bool max = true; };
struct ActivationStep { const float* x; float* y; int64_t elements; Activation act; ElementwiseLaunch launch; };
struct AddStep { const float* a; const float* b; float* y; int64_t elements; ElementwiseLaunch launch; };
struct DenseStep { DenseArgs args; DenseLaunch launch; };
// conv2d or dense on tensor cores (--precision fp16|bf16|int8 outside the tensor-core chain's family).
struct TcGemmStep { TcGemmArgs args; TcGemmOperands operands; };
struct SoftmaxStep { const float* x; float* y; int64_t length; SoftmaxLaunch launch; };
struct CopyStep { const float* x; float* y; int64_t elements; };  // flatten the planner did not alias
struct ScaleShiftStep {
  const float* x; float* y; const float* scale; const float* shift; int64_t channels, inner; ElementwiseLaunch launch;
};
// A concat: each input copied into its slice [offset, offset + elements) of every output sample.
struct ConcatSlice { const float* x; int64_t elements, offset; };
struct ConcatStep { std::vector<ConcatSlice> slices; float* y; int64_t out_elements; ElementwiseLaunch launch; };

using StepOp = std::variant<ConvStep, PoolStep, ActivationStep, AddStep, DenseStep, SoftmaxStep, CopyStep,
                            ScaleShiftStep, ConcatStep, TcGemmStep>;

struct Step {
  std::string context;  // "node 'c1' (conv2d + relu 'r1')": names the node in every CUDA error
  StepOp op;
};

class CustomExecutable final : public gpu::GpuExecutable {
 public:
  CustomExecutable(const Graph& graph, const CompileOptions& options, std::string header, std::string not_fused)
      : CustomExecutable(plan_fusion(graph), options, std::move(header), std::move(not_fused)) {}

  void forward(int n) override;
  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override { return path_; }

 private:
  CustomExecutable(FusionPlan plan, const CompileOptions& options, std::string header, std::string not_fused)
      : GpuExecutable(plan.graph, options),
        tc_(tc_operands(options.precision)),
        path_(tc_ ? fmt::format("per-node kernels, conv2d and dense on tensor cores in {} (not the tensor-core chain: {})",
                                precision_name(options.precision), not_fused)
                  : "per-node kernels (not fused: " + not_fused + ")") {
    const std::vector<int>& fused_into = plan.fused_into;
    const std::vector<bool>& absorbed = plan.absorbed;
    const DeviceLimits limits = read_device_limits();
    const auto& nodes = graph_.nodes;
    const int count = int(nodes.size());
    std::vector<std::string> lines;
    lines.push_back(std::move(header));
    lines.push_back("path: " + path_);
    if (!tc_)
      lines.push_back("per-node kernels: fp32 storage, double accumulation (the CPU reference's order)");
    else
      lines.push_back(fmt::format(
          "per-node kernels: fp32 values between nodes; conv2d and dense read {} operands (inputs rounded as they are "
          "staged, weights converted once), {} sums on mma.sync; every other op fp32 with double sums",
          precision_name(options.precision), tc_ == TcGemmOperands::INT8 ? "int32" : "fp32"));
    if (tc_ == TcGemmOperands::INT8) require_calibration(*graph_.model);
    lines.push_back(fmt::format("arena: {} floats/sample x {} = {:.2f} MiB", graph_.arena_floats_per_sample,
                                max_batch_, double(graph_.arena_floats_per_sample) * max_batch_ * 4 / (1 << 20)));

    if (plan.dropped_values > 0)
      lines.push_back(fmt::format("fusion: {} activation(s) folded into conv2d/dense epilogues; arena laid out "
                                  "for them ({} floats/sample, unfused plan {})",
                                  plan.dropped_values, graph_.arena_floats_per_sample, plan.core_arena_floats));

    const ElementwiseLaunch elementwise = elementwise_plan(limits);
    for (int i = 0; i < count; ++i) {
      if (absorbed[i]) continue;
      const PlannedNode& planned = nodes[i];
      const formats::Node& node = *planned.node;
      const Value& in = graph_.value(planned.inputs.at(0));
      const int out_id = fused_into[i] >= 0 ? nodes[fused_into[i]].output : planned.output;
      const Value& out = graph_.value(out_id);
      const Activation fused_act =
          fused_into[i] >= 0 ? *activation_of(nodes[fused_into[i]].node->op) : Activation::None;
      const std::string fused_text =
          fused_into[i] >= 0 ? fmt::format(" + {} '{}'", activation_name(fused_act), nodes[fused_into[i]].node->name)
                             : std::string();
      const std::string context = fmt::format("node '{}' ({}{})", node.name, formats::op_name(node.op), fused_text);
      check_no_overlap(planned, out, context);
      const float* x = device_value(planned.inputs[0]);
      float* y = device_value(out_id);

      switch (node.op) {
        case OpType::Conv2D: {
          Conv2dArgs a;
          a.x = x;
          a.y = y;
          a.weight = upload(node.weight, node.name, "weight");
          a.bias = upload(node.bias, node.name, "bias");
          a.activation = fused_act;
          Conv2dShape& s = a.shape;
          set_windowed_shape(s, node, in, out);
          if (tc_) {
            add_tc_gemm(context, node, planned, x, y, fused_act, as_tc_shape(s), lines);
            break;
          }
          const Conv2dLaunch l = conv2d_plan(s, limits);
          if (l.tiled)
            lines.push_back(fmt::format(
                "{}: conv2d_forward tiled, block {}x{}x{} ({} px x {} out channels), grid n*{} x {}, {} in channel(s) "
                "per chunk, {} B shared",
                context, l.tile_w, l.tile_h, l.oz, l.tile_w * l.tile_h, l.oz * kConvOcPerThread, l.tiles_x * l.tiles_y,
                l.oc_groups, l.channels_per_chunk, l.shared_bytes));
          else
            lines.push_back(fmt::format("{}: conv2d_forward direct (window too large to stage), {} threads/block",
                                        context, l.threads));
          steps_.push_back({context, ConvStep{a, l}});
          break;
        }
        case OpType::MaxPool:
        case OpType::AvgPool: {
          Pool2dArgs a;
          a.x = x;
          a.y = y;
          a.count_include_pad = node.count_include_pad;
          a.shape = pool_shape(node, in, out);
          const Pool2dShape& s = a.shape;
          const PoolLaunch l = pool_plan(s, limits);
          const bool is_max = node.op == OpType::MaxPool;
          lines.push_back(fmt::format("{}: {}_forward, one thread per output, {} threads/block{}", context,
                                      is_max ? "maxpool" : "avgpool", l.threads,
                                      is_max ? "" : (node.count_include_pad ? ", count_include_pad" : ", exclude pad")));
          steps_.push_back({context, PoolStep{a, l, is_max}});
          break;
        }
        case OpType::Relu:
        case OpType::Tanh:
        case OpType::Sigmoid: {
          const Activation act = *activation_of(node.op);
          lines.push_back(fmt::format("{}: activation_forward ({}), {} threads/block", context, activation_name(act),
                                      elementwise.threads));
          steps_.push_back({context, ActivationStep{x, y, in.elements, act, elementwise}});
          break;
        }
        case OpType::Add: {
          lines.push_back(fmt::format("{}: add_forward, {} threads/block", context, elementwise.threads));
          steps_.push_back({context, AddStep{x, device_value(planned.inputs.at(1)), y, in.elements, elementwise}});
          break;
        }
        case OpType::ScaleShift: {
          const int64_t channels = in.shape.at(0);
          lines.push_back(fmt::format("{}: scale_shift_forward ({} channels of {}), {} threads/block", context,
                                      channels, in.elements / channels, elementwise.threads));
          steps_.push_back({context, ScaleShiftStep{x, y, upload(node.weight, node.name, "scale"),
                                                    upload(node.bias, node.name, "shift"), channels,
                                                    in.elements / channels, elementwise}});
          break;
        }
        case OpType::Concat: {
          ConcatStep c{{}, y, out.elements, elementwise};
          int64_t offset = 0;
          for (int input : planned.inputs) {
            const int64_t e = graph_.value(input).elements;
            c.slices.push_back(ConcatSlice{device_value(input), e, offset});
            offset += e;
          }
          if (offset != out.elements)
            throw std::logic_error(fmt::format("custom: {}: inputs hold {} floats per sample, the output {}", context,
                                               offset, out.elements));
          lines.push_back(fmt::format("{}: slice_copy_forward x {} (one per input), {} threads/block", context,
                                      c.slices.size(), elementwise.threads));
          steps_.push_back({context, std::move(c)});
          break;
        }
        case OpType::Dense: {
          DenseArgs a;
          a.x = x;
          a.y = y;
          a.weight = upload(node.weight, node.name, "weight");
          a.bias = upload(node.bias, node.name, "bias");
          a.in_features = as_int(in.elements);
          a.units = as_int(out.elements);
          a.activation = fused_act;
          if (tc_) {
            TcGemmShape s;
            s.channels = a.in_features;
            s.out_channels = a.units;
            add_tc_gemm(context, node, planned, x, y, fused_act, s, lines);
            break;
          }
          const DenseLaunch l = dense_plan(a.in_features, a.units, max_batch_, limits);
          lines.push_back(fmt::format("{}: dense_forward tiled SGEMM, {}x{} output tile, 16x16 threads, K step 16",
                                      context, l.tile(), l.tile()));
          steps_.push_back({context, DenseStep{a, l}});
          break;
        }
        case OpType::Softmax: {
          const SoftmaxLaunch l = softmax_plan(in.elements, limits);
          lines.push_back(fmt::format("{}: softmax_forward, one warp per row, {} rows per block", context,
                                      l.warps_per_block));
          steps_.push_back({context, SoftmaxStep{x, y, in.elements, l}});
          break;
        }
        case OpType::Flatten: {
          if (graph_.value(planned.output).arena_offset == in.arena_offset) {
            lines.push_back(fmt::format("{}: view of '{}' (no kernel)", context, in.name));
          } else {
            lines.push_back(fmt::format("{}: device-to-device copy (the planner did not alias it)", context));
            steps_.push_back({context, CopyStep{x, y, in.elements}});
          }
          break;
        }
      }
    }
    for (const auto& line : lines) summary_ += (summary_.empty() ? "" : "\n") + line;
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading weights");
  }

  void run_steps(int n) {
    const cudaStream_t s = stream();
    for (const Step& step : steps_) {
      std::visit(
          [&](const auto& op) {
            using T = std::decay_t<decltype(op)>;
            if constexpr (std::is_same_v<T, ConvStep>) {
              conv2d_forward(op.args, op.launch, n, s, step.context);
            } else if constexpr (std::is_same_v<T, PoolStep>) {
              if (op.max) maxpool_forward(op.args, op.launch, n, s, step.context);
              else avgpool_forward(op.args, op.launch, n, s, step.context);
            } else if constexpr (std::is_same_v<T, ActivationStep>) {
              activation_forward(op.x, op.y, op.elements * n, op.act, op.launch, s, step.context);
            } else if constexpr (std::is_same_v<T, AddStep>) {
              add_forward(op.a, op.b, op.y, op.elements * n, op.launch, s, step.context);
            } else if constexpr (std::is_same_v<T, DenseStep>) {
              dense_forward(op.args, op.launch, n, s, step.context);
            } else if constexpr (std::is_same_v<T, SoftmaxStep>) {
              softmax_forward(op.x, op.y, n, op.length, op.launch, s, step.context);
            } else if constexpr (std::is_same_v<T, ScaleShiftStep>) {
              scale_shift_forward(op.x, op.y, op.scale, op.shift, n, op.channels, op.inner, op.launch, s, step.context);
            } else if constexpr (std::is_same_v<T, ConcatStep>) {
              for (const ConcatSlice& slice : op.slices)
                slice_copy_forward(slice.x, op.y, n, slice.elements, op.out_elements, slice.offset, op.launch, s,
                                   step.context);
            } else if constexpr (std::is_same_v<T, TcGemmStep>) {
              tc_gemm_forward(op.args, op.operands, n, s, step.context);
            } else if constexpr (std::is_same_v<T, CopyStep>) {
              CUDA_CHECK_CTX(cudaMemcpyAsync(op.y, op.x, size_t(op.elements) * size_t(n) * sizeof(float),
                                             cudaMemcpyDeviceToDevice, s),
                             step.context);
            }
          },
          step.op);
    }
  }

  static std::optional<TcGemmOperands> tc_operands(Precision p) {
    switch (p) {
      case Precision::FP16: return TcGemmOperands::FP16;
      case Precision::BF16: return TcGemmOperands::BF16;
      case Precision::INT8: return TcGemmOperands::INT8;
      default: return std::nullopt;
    }
  }

  static TcGemmShape as_tc_shape(const Conv2dShape& c) {
    TcGemmShape s;
    s.channels = c.channels, s.height = c.height, s.width = c.width;
    s.out_channels = c.out_channels, s.out_height = c.out_height, s.out_width = c.out_width;
    s.kernel_h = c.kernel_h, s.kernel_w = c.kernel_w, s.stride_h = c.stride_h, s.stride_w = c.stride_w;
    s.pad_top = c.pad_top, s.pad_left = c.pad_left;
    return s;
  }

  // A conv2d or dense node (with its folded activation) as a tensor-core implicit GEMM: weights
  // converted (int8: quantized with the input's calibrated scale) and uploaded once.
  void add_tc_gemm(const std::string& context, const formats::Node& node, const PlannedNode& planned, const float* x,
                   float* y, Activation act, const TcGemmShape& shape, std::vector<std::string>& lines) {
    const TcGemmOperands ops = *tc_;
    const float in_scale = ops == TcGemmOperands::INT8 ? calibrated_input_scale(graph_, planned.inputs[0], node) : 0.0f;
    const TcGemmWeights w = tc_gemm_weights(node, shape.out_channels, shape.k(), ops, in_scale);
    TcGemmArgs a;
    a.x = x;
    a.y = y;
    a.shape = shape;
    a.activation = act;
    a.k_padded = w.k_padded;
    a.in_scale = in_scale;
    a.weight = upload_bytes(w.operands.data(), w.operands.size(), fmt::format("operands of node '{}'", node.name));
    a.bias = upload_floats(w.bias, fmt::format("bias of node '{}'", node.name));
    if (ops == TcGemmOperands::INT8) a.scale = upload_floats(w.scale, fmt::format("scales of node '{}'", node.name));
    lines.push_back(fmt::format(
        "{}: tc_gemm_forward {} (implicit GEMM on mma.sync {}), k {} padded to {}, {} output channels in tiles of {} "
        "(of {} where that grid still has {} blocks), {} rows per block{}",
        context, precision_name(options_precision()), ops == TcGemmOperands::INT8 ? "m16n8k32" : "m16n8k16",
        shape.k(), w.k_padded, shape.out_channels, kTcGemmCols, kTcGemmWideCols, kTcGemmWideMinBlocks, kTcGemmRows,
        ops == TcGemmOperands::INT8 ? fmt::format(", input scale {:.6g} per tensor, weights per channel", in_scale)
                                    : std::string()));
    steps_.push_back({context, TcGemmStep{a, ops}});
  }

  Precision options_precision() const {
    return tc_ == TcGemmOperands::BF16 ? Precision::BF16 : tc_ == TcGemmOperands::INT8 ? Precision::INT8 : Precision::FP16;
  }

  const void* upload_bytes(const void* data, size_t bytes, const std::string& what) {
    gpu::DeviceBuffer<unsigned char> buffer(bytes, what);
    CUDA_CHECK_CTX(cudaMemcpyAsync(buffer.data(), data, bytes, cudaMemcpyHostToDevice, stream()), "uploading " + what);
    operand_buffers_.push_back(std::move(buffer));
    return operand_buffers_.back().data();
  }
  const float* upload_floats(const std::vector<float>& v, const std::string& what) {
    gpu::DeviceBuffer<float> buffer(v.size(), what);
    CUDA_CHECK_CTX(cudaMemcpyAsync(buffer.data(), v.data(), buffer.bytes(), cudaMemcpyHostToDevice, stream()),
                   "uploading " + what);
    weights_.push_back(std::move(buffer));
    return weights_.back().data();
  }

  // Parameters go to the device once, here; nullptr for an absent optional tensor.
  const float* upload(const std::optional<formats::Tensor>& tensor, const std::string& node, const char* role) {
    if (!tensor) return nullptr;
    const std::string what = fmt::format("{} of node '{}'", role, node);
    if (tensor->values.empty()) throw std::invalid_argument(fmt::format("custom: empty {}", what));
    gpu::DeviceBuffer<float> buffer(tensor->values.size(), what);
    // On our stream (a non-blocking stream does not order with the legacy default stream that a
    // plain cudaMemcpy uses); the constructor synchronizes once after the last upload.
    CUDA_CHECK_CTX(cudaMemcpyAsync(buffer.data(), tensor->values.data(), buffer.bytes(), cudaMemcpyHostToDevice,
                                   stream()),
                   "uploading " + what);
    weights_.push_back(std::move(buffer));
    return weights_.back().data();
  }

  // The planner never gives a node's output the block of one of its inputs (lifetimes that touch
  // conflict); the kernels rely on it (__restrict__, windows read after neighbours are written).
  void check_no_overlap(const PlannedNode& planned, const Value& out, const std::string& context) const {
    if (planned.node->op == OpType::Flatten) return;
    for (int in : planned.inputs)
      if (blocks_overlap(graph_.value(in), out))
        throw std::logic_error(fmt::format("custom: {} would write its output over its input '{}' in the arena",
                                           context, graph_.value(in).name));
  }

  std::optional<TcGemmOperands> tc_;  // fp16 / bf16 / int8: conv2d and dense on tensor cores
  std::vector<gpu::DeviceBuffer<float>> weights_;
  std::vector<gpu::DeviceBuffer<unsigned char>> operand_buffers_;
  std::vector<Step> steps_;
  std::string path_;
  std::string summary_;
};

void CustomExecutable::forward(int n) { run_steps(n); }

// For a graph the fused chain can run: why the general path runs it instead, or nullopt. From the
// graph's shapes alone, never the batch (the two paths sum in different orders, and a model's bits
// must not change with the batch).
std::optional<std::string> general_path_wins(const Graph& graph) {
  int64_t conv_macs = 0, dense_macs = 0;  // multiply-adds per sample
  for (const PlannedNode& pn : graph.nodes) {
    const formats::Node& n = *pn.node;
    if (n.op != OpType::Conv2D && n.op != OpType::Dense) continue;
    const Value& out = graph.value(pn.output);
    const int64_t spatial = n.op == OpType::Conv2D ? out.elements / std::max<int64_t>(out.shape.at(0), 1) : 1;
    (n.op == OpType::Conv2D ? conv_macs : dense_macs) += int64_t(n.weight->values.size()) * spatial;
  }
  if (conv_macs > kFusedChainMaxConvMacs)
    return fmt::format("its conv layers take {:.1f} M multiply-adds per sample, above the {:.1f} M up to which the "
                       "fused chain beats the general path",
                       double(conv_macs) / 1e6, double(kFusedChainMaxConvMacs) / 1e6);
  if (conv_macs == 0 && dense_macs > kFusedDenseChainMaxMacs)
    return fmt::format("a dense chain of {:.2f} M multiply-adds per sample, above the {:.2f} M up to which the "
                       "fused chain beats the general path",
                       double(dense_macs) / 1e6, double(kFusedDenseChainMaxMacs) / 1e6);
  return std::nullopt;
}

class CustomBackend final : public Backend {
 public:
  explicit CustomBackend(const CustomOptions& options) : options_(options) {}
  std::string name() const override { return "custom"; }
  std::string description() const override {
    return "hand-written CUDA kernels (no cuDNN, no cuBLAS) on " + device_description();
  }
  std::optional<std::string> unsupported(const formats::Node& node) const override {
    switch (node.op) {
      case OpType::Conv2D:
      case OpType::Dense:
        if (!node.weight) return std::string("no weight tensor");
        return std::nullopt;
      case OpType::AvgPool: case OpType::MaxPool: case OpType::Relu: case OpType::Tanh: case OpType::Sigmoid:
      case OpType::Flatten: case OpType::Softmax: case OpType::Add: case OpType::Concat:
        return std::nullopt;
      case OpType::ScaleShift:
        if (!node.weight || !node.bias) return std::string("scale_shift without its scale and shift tensors");
        return std::nullopt;
    }
    return std::string("op not implemented by the custom backend");
  }
  int preferred_batch() const override { return 65536; }
  // fp16, bf16 and int8 on tensor cores: the chain for the models of its family, per-node kernels otherwise.
  bool supports(Precision) const override { return true; }
  std::vector<std::string> devices() const override { return gpu::device_descriptions(); }
  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options) override {
    require_precision(*this, options);
    check_supported(*this, graph);
    // Everything below (device limits, weights, kernel attributes) on the options' device. A reduced
    // precision is a permission, as on the cudnn backend: the fastest precision it allows runs
    // (engine/gpu/precision_choice.hpp), timed at max_batch, and the plan's second line says which.
    const int device = gpu::resolve_device(options.device);
    gpu::DeviceGuard guard(device);
    auto chosen = gpu::compile_fastest<Executable>(
        options, options_.precision_choice, [&](const CompileOptions& at) { return compile_here(graph, at); },
        // Every executable compile_here makes is a GpuExecutable, whose staged execution times it.
        [&](Executable& candidate) { return gpu::time_compute_ms(*candidate.staged_execution(), options.max_batch); });
    return gpu::bind_to_device(device, std::move(chosen.exe), std::move(chosen.note));
  }

  // Training: the ops and refusals of the host trainers (every v1 op), fp32 kernels in
  // engine/custom/train/ (conv, dense, pool) over engine/gpu/train/ (the rest). Unavailable
  // without a GPU: the registry reports the backend unavailable.
  std::optional<std::string> cannot_train() const override { return std::nullopt; }
  std::unique_ptr<TrainExecutable> compile_training(const Graph& graph, const TrainOptions& options) override {
    check_supported(*this, graph);
    return train::make_gpu_trainer(graph, options);
  }

 private:
  std::unique_ptr<Executable> compile_here(const Graph& graph, const CompileOptions& options) {
    const fused::DeviceShape device = read_device_shape();
    if (options.precision == Precision::FP16 || options.precision == Precision::BF16 ||
        options.precision == Precision::INT8)
      return compile_tc(graph, options, device);
    const std::string header = fmt::format(
        "custom: hand-written CUDA kernels on {}; deterministic by construction (fixed summation order, no "
        "atomics){}",
        device_description(),
        options.precision == Precision::TF32 ? "; TF32 requested: these kernels have no TF32 path, fp32 used" : "");
    if (!options.fuse)
      return std::make_unique<CustomExecutable>(graph, options, header, "turned off (--no-fuse): the GPU oracle");
    const std::optional<bool> forced = options_.general.over_fused_chain;
    std::string not_fused = "the general path requested (CustomOptions::general)";
    if (!forced.value_or(false)) {
      auto planned = fused::plan_fused(graph, device);
      auto* plan = std::get_if<fused::FusedPlan>(&planned);
      std::optional<std::string> general_wins = plan && !forced ? general_path_wins(graph) : std::nullopt;
      if (plan && !general_wins)
        return fused::make_fused_executable(graph, std::move(*plan), options, options_.image, device,
                                            header + "; fused path: fp32 accumulation, accurate tanhf/expf");
      not_fused = plan ? *general_wins : std::get<std::string>(planned);
    }
    return general::make_general_executable(graph, options, options_.general, header, not_fused);
  }

  // fp16 / bf16 / int8: the tensor-core chain (one kernel) for the models of its family; any other model,
  // or --no-fuse, runs the per-node kernels with conv2d and dense on tensor cores (tc_gemm.hpp). int8
  // without calibration is refused either way.
  std::unique_ptr<Executable> compile_tc(const Graph& graph, const CompileOptions& options,
                                         const fused::DeviceShape& device) {
    const tc::TcOperands operands = options.precision == Precision::BF16   ? tc::TcOperands::BF16
                                    : options.precision == Precision::INT8 ? tc::TcOperands::INT8
                                                                           : tc::TcOperands::FP16;
    const char* type = precision_name(options.precision);
    const int smem = operands == tc::TcOperands::INT8 ? tc::kQSmemBytes : tc::kPairSmemBytes;
    const std::string header = fmt::format(
        "custom: hand-written CUDA kernels on {}; {} on tensor cores; deterministic by construction (fixed summation "
        "order, no atomics)",
        device_description(), type);
    std::string why_not = "turned off (--no-fuse)";
    if (options.fuse) {
      auto planned = tc::plan_tc_chain(graph, operands);
      if (auto* refusal = std::get_if<tc::TcRefusal>(&planned); refusal && refusal->calibration)
        throw std::invalid_argument(refusal->why);
      if (auto* refusal = std::get_if<tc::TcRefusal>(&planned)) {
        why_not = fmt::format("model '{}' is not of its family (engine/custom/fused/tc_chain_params.hpp): {}",
                              graph.model->name, refusal->why);
      } else if (device.shared_optin_bytes < smem) {
        why_not = fmt::format("its kernel needs {} KiB of shared memory per block; this device offers {} KiB",
                              smem / 1024, device.shared_optin_bytes / 1024);
      } else {
        return tc::make_tc_chain_executable(graph, std::get<tc::TcChainPlan>(std::move(planned)), options,
                                            options_.tc, device.multiprocessors, header);
      }
      // fp16 / bf16 outside the chain's family: the tensor-core general path where it takes the graph.
      if (operands != tc::TcOperands::INT8 && options_.tc_general.enabled) {
        auto general = tcg::plan_tc_general(graph, operands == tc::TcOperands::BF16,
                                             options_.tc_general.convolutions);
        if (auto* plan = std::get_if<tcg::TcgPlan>(&general))
          return tcg::make_tc_general_executable(graph, std::move(*plan), options, options_.tc_general,
                                                 device.multiprocessors, header, why_not);
        why_not += "; not the tensor-core general path: " + std::get<std::string>(general);
      }
    }
    return std::make_unique<CustomExecutable>(graph, options, header, why_not);
  }

  CustomOptions options_;
};

}  // namespace

std::unique_ptr<Backend> make_custom_backend(const CustomOptions& options) {
  return std::make_unique<CustomBackend>(options);
}

}  // namespace engine::custom

namespace engine {

void register_custom_backend(BackendRegistry& registry) {
  registry.add(BackendEntry{
      .name = "custom",
      .summary = "hand-written CUDA kernels (no cuDNN, no cuBLAS): fp32; fp16/bf16/int8 on tensor cores (one "
                 "fused kernel for the LeNet-5 family); deterministic",
      .priority = 20,
      .unavailable_reason = [] { return gpu::no_gpu_reason(); },
      .create = [] { return custom::make_custom_backend(); },
  });
}

}  // namespace engine

#include "engine/custom/general/general_executable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <variant>
#include <vector>

#include "engine/custom/elementwise.hpp"
#include "engine/custom/general/general_plan.hpp"
#include "engine/custom/node_shapes.hpp"
#include "engine/custom/pooling.hpp"
#include "engine/custom/softmax.hpp"
#include "engine/gpu/cuda_check.hpp"
#include "engine/gpu/gpu_executable.hpp"

namespace engine::custom::general {
namespace {

int multiprocessor_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms > 0 ? sms : 1;
}

class GeneralExecutable final : public gpu::GpuExecutable {
 public:
  GeneralExecutable(GeneralPlan plan, const CompileOptions& options, const GeneralOptions& general, std::string header,
                    std::string why_not_fused)
      : GpuExecutable(plan.graph, options),
        plan_(std::move(plan)),
        forced_tile_(general.tile),
        forced_on_blocks_(general.chunks_on_blocks),
        dense_row_copies_(general.dense_row_copies),
        sms_(multiprocessor_count()),
        why_not_fused_(std::move(why_not_fused)) {
    if (forced_tile_ && (*forced_tile_ < 0 || *forced_tile_ >= int(GemmTile::Count)))
      throw std::invalid_argument(fmt::format("custom: GEMM tile {} outside 0..{}", *forced_tile_,
                                              int(GemmTile::Count) - 1));
    limits_.multiprocessors = sms_;
    elementwise_ = elementwise_plan(limits_);
    if (plan_.buffer_floats > 0) {
      buffer_ = gpu::DeviceBuffer<float>(size_t(plan_.buffer_floats) * size_t(max_batch_), "general path activations");
      // All-ones bytes are a NaN, as in the arena: a value a step forgets to write shows downstream.
      CUDA_CHECK_CTX(cudaMemsetAsync(buffer_.data(), 0xff, buffer_.bytes(), stream()), "poisoning the plan buffer");
    }
    int gemms = 0;
    for (const Step& s : plan_.steps) gemms += std::holds_alternative<GemmStep>(s.op) ? 1 : 0;
    path_ = fmt::format(
        "general fp32 ({} kernels: {} implicit-GEMM conv2d/dense with fused epilogues, {} other; fused chain not "
        "taken: {})",
        plan_.steps.size(), gemms, int(plan_.steps.size()) - gemms, why_not_fused_);
    std::vector<std::string> lines{std::move(header), "fused chain not taken: " + why_not_fused_};
    lines.push_back(fmt::format(
        "path: general fp32 ({} kernel(s): {} implicit-GEMM conv2d/dense with fused epilogues, {} other; the per-node "
        "double kernels are not used)",
        plan_.steps.size(), gemms, int(plan_.steps.size()) - gemms));
    lines.push_back(fmt::format(
        "general: fp32 fmaf over k in order within each of a layer's fixed K chunks, the bias plus the chunk sums in "
        "order (same bits for any tile and batch); {} node(s) run in GEMM epilogues, {} concat input(s) written in place",
        plan_.fused_nodes, plan_.in_place_slices));
    lines.push_back(fmt::format("arena: {} floats/sample (input and outputs); plan buffer: {} floats/sample x {} = "
                                "{:.2f} MiB",
                                graph_.arena_floats_per_sample, plan_.buffer_floats, max_batch_,
                                double(plan_.buffer_floats) * max_batch_ * 4 / (1 << 20)));
    for (Step& step : plan_.steps) {
      std::visit([&](auto& op) { lines.push_back(prepare(step, op)); }, step.op);
    }
    if (partial_floats_ > 0) {
      partial_ = gpu::DeviceBuffer<float>(size_t(partial_floats_), "K chunks' partial sums");
      arrivals_ = gpu::DeviceBuffer<unsigned>(size_t(arrival_counters_), "K chunks' arrival counters");
      CUDA_CHECK_CTX(cudaMemsetAsync(arrivals_.data(), 0, arrivals_.bytes(), stream()), "zeroing the arrival counters");
      lines.push_back(fmt::format("K chunks' partial sums (small batches): {:.2f} MiB", double(partial_floats_) * 4 / (1 << 20)));
    }
    for (const auto& line : lines) summary_ += (summary_.empty() ? "" : "\n") + line;
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading the general path's weights");
  }

  void forward(int n) override {
    const cudaStream_t s = stream();
    for (size_t i = 0; i < plan_.steps.size(); ++i) {
      const Step& step = plan_.steps[i];
      std::visit(
          [&](const auto& op) {
            using T = std::decay_t<decltype(op)>;
            if constexpr (std::is_same_v<T, GemmStep>) {
              const GemmArgs& a = gemm_args_[size_t(launch_index_[i])];
              const Launch l = launch_for(a, n);
              conv_gemm_forward(a, l.tile, l.across_blocks ? ChunkScratch{partial_.data(), arrivals_.data()} : ChunkScratch{},
                                n, s, step.context);
            } else if constexpr (std::is_same_v<T, PoolStep>) {
              const Pool2dArgs& a = pool_args_[size_t(launch_index_[i])];
              if (op.max) maxpool_forward(a, pool_plan(a.shape, limits_), n, s, step.context);
              else avgpool_forward(a, pool_plan(a.shape, limits_), n, s, step.context);
            } else if constexpr (std::is_same_v<T, UnaryStep>) {
              activation_forward(dense_view(op.x), dense_view(op.y), elements(op.x) * n, op.act, elementwise_, s,
                                 step.context);
            } else if constexpr (std::is_same_v<T, AddStep>) {
              add_forward(dense_view(op.a), dense_view(op.b), dense_view(op.y), elements(op.a) * n, elementwise_, s,
                          step.context);
            } else if constexpr (std::is_same_v<T, ScaleShiftStep>) {
              const int64_t channels = graph_.value(op.x).shape.at(0);
              scale_shift_forward(dense_view(op.x), dense_view(op.y), params_[size_t(launch_index_[i])],
                                  params_[size_t(launch_index_[i]) + 1], n, channels, elements(op.x) / channels,
                                  elementwise_, s, step.context);
            } else if constexpr (std::is_same_v<T, SoftmaxStep>) {
              softmax_forward(dense_view(op.x), dense_view(op.y), n, elements(op.x),
                              softmax_plan(elements(op.x), limits_), s, step.context);
            } else if constexpr (std::is_same_v<T, ConcatStep>) {
              for (size_t k = 0; k < op.inputs.size(); ++k)
                slice_copy_forward(dense_view(op.inputs[k]), dense_view(op.y), n, elements(op.inputs[k]),
                                   elements(op.y), op.offsets[k], elementwise_, s, step.context);
            }
          },
          step.op);
    }
  }

  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override { return path_; }

 private:
  // A GEMM's launch at batch n: its chunks on separate blocks (scratch partial sums) while even the
  // smallest tile leaves multiprocessors idle, else in one thread; then the tile (any gives the
  // same bits).
  struct Launch {
    GemmTile tile;
    bool across_blocks;
  };
  Launch launch_for(const GemmArgs& a, int n) const {
    const int64_t rows = gemm_rows(a.shape, a.epilogue.pool_at >= 0, n);
    const int cols = a.shape.out_channels;
    const bool across = a.chunks.count > 1 &&
                        (forced_on_blocks_ ? *forced_on_blocks_ : chunks_across_blocks(rows, cols, sms_)) &&
                        gemm_partial_floats(rows, cols, a.chunks) <= partial_floats_ &&
                        gemm_arrival_counters(rows, cols) <= arrival_counters_;
    const int blocks_wanted = across ? (sms_ + a.chunks.count - 1) / a.chunks.count : sms_;
    return {forced_tile_ ? GemmTile(*forced_tile_) : choose_gemm_tile(rows, cols, blocks_wanted), across};
  }
  std::string describe(const GemmArgs& a, int n) const {
    const Launch l = launch_for(a, n);
    return fmt::format("tile {}{} at batch {}", gemm_tile_name(l.tile),
                       a.chunks.count > 1 ? (l.across_blocks ? " x chunks on blocks" : ", chunks in thread") : "", n);
  }

  int64_t elements(int value) const { return graph_.value(value).elements; }

  // A value's block start (its samples are block.floats apart).
  float* block_base(int value) const {
    const View& v = plan_.views.at(size_t(value));
    if (v.block < 0) throw std::logic_error(fmt::format("custom general: value '{}' has no storage", graph_.value(value).name));
    const Block& b = plan_.blocks[size_t(v.block)];
    return b.arena_value >= 0 ? device_value(b.arena_value) : buffer_.data() + b.offset * max_batch_;
  }
  // A value every per-node kernel reads or writes as a contiguous [n, elements] block.
  float* dense_view(int value) const {
    const View& v = plan_.views.at(size_t(value));
    const Block& b = plan_.blocks.at(size_t(v.block));
    if (v.offset != 0 || b.floats != elements(value))
      throw std::logic_error(fmt::format("custom general: value '{}' is a slice where a whole block is needed",
                                         graph_.value(value).name));
    return block_base(value);
  }

  const float* upload(const std::vector<float>& v, const std::string& what) {
    gpu::DeviceBuffer<float> buffer(v.size(), what);
    CUDA_CHECK_CTX(cudaMemcpyAsync(buffer.data(), v.data(), buffer.bytes(), cudaMemcpyHostToDevice, stream()),
                   "uploading " + what);
    weights_.push_back(std::move(buffer));
    return weights_.back().data();
  }
  const float* upload_param(int node, bool second, const char* role) {
    const formats::Node& n = *graph_.nodes[size_t(node)].node;
    const auto& t = second ? n.bias : n.weight;
    if (!t) return nullptr;
    return upload(t->values, fmt::format("{} of node '{}'", role, n.name));
  }

  std::string prepare(const Step& step, GemmStep& op) {
    launch_index_.push_back(int(gemm_args_.size()));
    GemmArgs a;
    a.shape = op.shape;
    a.x = dense_view(op.x);
    a.oc_padded = op.oc_padded;
    a.dense_row_copies = dense_row_copies_;
    a.weight = upload(op.weight, fmt::format("packed weight of node '{}'", graph_.nodes[size_t(op.bias_node)].node->name));
    if (!op.k_table.empty()) {
      gpu::DeviceBuffer<int> table(op.k_table.size(), "k table");
      CUDA_CHECK_CTX(cudaMemcpyAsync(table.data(), op.k_table.data(), table.bytes(), cudaMemcpyHostToDevice, stream()),
                     "uploading the k table of " + step.context);
      a.k_table = reinterpret_cast<const int4*>(table.data());
      tables_.push_back(std::move(table));
    }
    op.weight.clear();
    op.weight.shrink_to_fit();
    GemmEpilogue& e = a.epilogue;
    e.bias = upload_param(op.bias_node, true, "bias");
    e.count = int(op.stages.size());
    e.pool_at = op.pool_at;
    std::string stages;
    for (int i = 0; i < e.count; ++i) {
      const StagePlan& sp = op.stages[size_t(i)];
      Stage& st = e.stages[i];
      st.kind = sp.kind;
      st.act = sp.act;
      if (i == op.pool_at) stages += " > maxpool 2x2";
      if (sp.kind == StageKind::Act) {
        stages += std::string(" > ") + activation_name(sp.act);
      } else if (sp.kind == StageKind::ScaleShift) {
        st.scale = upload_param(sp.node, false, "scale");
        st.shift = upload_param(sp.node, true, "shift");
        stages += " > scale_shift";
      } else {
        st.residual = dense_view(sp.residual);
        stages += fmt::format(" > add '{}'", graph_.value(sp.residual).name);
      }
    }
    if (op.pool_at == e.count) stages += " > maxpool 2x2";
    const View& v = plan_.views.at(size_t(op.y));
    e.y = block_base(op.y);
    e.y_stride = plan_.blocks[size_t(v.block)].floats;
    e.y_offset = v.offset;
    if (v.offset != 0 || e.y_stride != elements(op.y)) stages += fmt::format(" > concat slice at {}", v.offset);
    const bool pooled = op.pool_at >= 0;
    a.chunks = op.chunks;
    // Scratch for the largest batch whose launch still runs the chunks on separate blocks.
    for (int n = forced_on_blocks_.value_or(false) ? max_batch_ : 1; a.chunks.count > 1 && n <= max_batch_; ++n) {
      const int64_t rows = gemm_rows(a.shape, pooled, n);
      if (!forced_on_blocks_ && !chunks_across_blocks(rows, a.shape.out_channels, sms_)) break;
      partial_floats_ = std::max(partial_floats_, gemm_partial_floats(rows, a.shape.out_channels, a.chunks));
      arrival_counters_ = std::max(arrival_counters_, gemm_arrival_counters(rows, a.shape.out_channels));
    }
    gemm_args_.push_back(a);
    const std::string chunks =
        a.chunks.count > 1 ? fmt::format("{} K chunks of {} k, summed in order", a.chunks.count, a.chunks.tiles * kGemmBk)
                           : std::string("K in one chunk");
    return fmt::format("{}: conv_gemm {} M = batch x {} N = {} K = {} ({}), epilogue bias{}; {}, {}", step.context,
                       a.shape.dense ? "dense" : "implicit conv", gemm_rows(a.shape, pooled, 1), a.shape.out_channels,
                       a.shape.k(), chunks, stages, describe(a, max_batch_), describe(a, 1));
  }
  std::string prepare(const Step& step, PoolStep& op) {
    launch_index_.push_back(int(pool_args_.size()));
    const formats::Node& node = *graph_.nodes[size_t(step.node)].node;
    const Value& in = graph_.value(op.x);
    const Value& out = graph_.value(op.y);
    Pool2dArgs a;
    a.x = dense_view(op.x);
    a.y = dense_view(op.y);
    a.count_include_pad = node.count_include_pad;
    a.shape = pool_shape(node, in, out);
    pool_args_.push_back(a);
    return fmt::format("{}: {}_forward (per-node kernel)", step.context, op.max ? "maxpool" : "avgpool");
  }
  std::string prepare(const Step& step, ScaleShiftStep&) {
    launch_index_.push_back(int(params_.size()));
    params_.push_back(upload_param(step.node, false, "scale"));
    params_.push_back(upload_param(step.node, true, "shift"));
    return step.context + ": scale_shift_forward (per-node kernel)";
  }
  std::string prepare(const Step& step, UnaryStep&) {
    launch_index_.push_back(-1);
    return step.context + ": activation_forward (per-node kernel)";
  }
  std::string prepare(const Step& step, AddStep&) {
    launch_index_.push_back(-1);
    return step.context + ": add_forward (per-node kernel)";
  }
  std::string prepare(const Step& step, SoftmaxStep&) {
    launch_index_.push_back(-1);
    return step.context + ": softmax_forward (one warp per row)";
  }
  std::string prepare(const Step& step, ConcatStep& op) {
    launch_index_.push_back(-1);
    return fmt::format("{}: {} input(s) copied into their slices (slice_copy_forward), the rest written in place",
                       step.context, op.inputs.size());
  }

  GeneralPlan plan_;
  std::optional<int> forced_tile_;
  std::optional<bool> forced_on_blocks_;
  bool dense_row_copies_ = false;
  int sms_;
  DeviceLimits limits_;
  ElementwiseLaunch elementwise_;
  gpu::DeviceBuffer<float> buffer_;
  gpu::DeviceBuffer<float> partial_;  // the K chunks' partial sums of small-batch launches
  gpu::DeviceBuffer<unsigned> arrivals_;  // per output tile of such a launch: its chunks done so far
  int64_t partial_floats_ = 0, arrival_counters_ = 0;
  std::vector<gpu::DeviceBuffer<float>> weights_;
  std::vector<gpu::DeviceBuffer<int>> tables_;
  std::vector<GemmArgs> gemm_args_;
  std::vector<Pool2dArgs> pool_args_;
  std::vector<const float*> params_;
  std::vector<int> launch_index_;  // per step: its entry in gemm_args_ / pool_args_ / params_, or -1
  std::string why_not_fused_;
  std::string path_;
  std::string summary_;
};

}  // namespace

std::unique_ptr<Executable> make_general_executable(const Graph& graph, const CompileOptions& options,
                                                    const GeneralOptions& general, std::string header,
                                                    std::string why_not_fused) {
  ChunkRule rule;
  rule.min_tiles = general.min_chunk_steps.value_or(kMinChunkTiles);
  rule.target_blocks = general.chunk_target_blocks.value_or(kChunkTargetBlocks);
  if (rule.min_tiles < 1 || rule.target_blocks < 1)
    throw std::invalid_argument(fmt::format("custom: K chunks of at least {} steps for {} blocks: both must be positive",
                                            rule.min_tiles, rule.target_blocks));
  return std::make_unique<GeneralExecutable>(plan_general(graph, rule), options, general, std::move(header),
                                             std::move(why_not_fused));
}

}  // namespace engine::custom::general

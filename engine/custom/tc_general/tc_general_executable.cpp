#include "engine/custom/tc_general/tc_general_executable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

#include "engine/custom/softmax.hpp"
#include "engine/custom/tc_general/tc_dense_gemm.hpp"
#include "engine/gpu/cuda_check.hpp"
#include "engine/gpu/gpu_executable.hpp"

namespace engine::custom::tcg {
namespace {

class TcGeneralExecutable final : public gpu::GpuExecutable {
 public:
  TcGeneralExecutable(const Graph& fused_graph, TcgPlan plan, const CompileOptions& options,
                      const TcGeneralOptions& tcg_options, int multiprocessors, std::string header,
                      std::string why_not_chain)
      : GpuExecutable(fused_graph, options), plan_(std::move(plan)), forced_tile_(tcg_options.tile),
        sms_(multiprocessors > 0 ? multiprocessors : 1) {
    if (forced_tile_ && (*forced_tile_ < 0 || *forced_tile_ >= kTcgTileCount))
      throw std::invalid_argument(fmt::format("custom: tensor-core general tile {} outside 0..{}", *forced_tile_,
                                              kTcgTileCount - 1));
    tcg_prepare("tensor-core general path: shared-memory limit");
    const char* type = plan_.bf16 ? "bf16" : "fp16";
    int gemms = 0, pools = 0;
    for (const TcgLayer& l : plan_.layers) {
      (l.kind == TcgKind::Pool ? pools : gemms) += 1;
      if ((long long)l.rows_per_image * max_batch_ > std::numeric_limits<int>::max())
        throw std::invalid_argument(fmt::format("custom: {}: {} rows per image x batch {} exceed the GEMM's int rows",
                                                l.context, l.rows_per_image, max_batch_));
    }
    for (long long per_image : plan_.buffers) {
      acts_.emplace_back(size_t(per_image) * size_t(max_batch_), "tensor-core general activations");
      // All-ones bits are a NaN in fp16 and bf16: a value a layer forgets to write shows downstream.
      CUDA_CHECK_CTX(cudaMemsetAsync(acts_.back().data(), 0xff, acts_.back().bytes(), stream()),
                     "poisoning the activation buffers");
    }
    if (plan_.softmax_node >= 0) {
      logits_ = gpu::DeviceBuffer<float>(size_t(plan_.layers.back().units) * size_t(max_batch_), "logits");
      CUDA_CHECK_CTX(cudaMemsetAsync(logits_.data(), 0xff, logits_.bytes(), stream()), "poisoning the logits");
      DeviceLimits limits;
      limits.multiprocessors = sms_;
      softmax_ = softmax_plan(plan_.layers.back().units, limits);
    }
    const int kernels = int(plan_.layers.size()) + (plan_.softmax_node >= 0 ? 1 : 0);
    path_ = fmt::format("tensor-core general path ({}, {} kernels; not the tensor-core chain: {})", type, kernels,
                        why_not_chain);
    summary_ = std::move(header);
    summary_ += "\ntensor-core chain not taken: " + why_not_chain;
    summary_ += fmt::format(
        "\npath: tensor-core general {} ({} kernel(s): {} dense / conv2d GEMM(s) on mma.sync m16n8k16 with fused "
        "epilogues{}{}; the per-node kernels are not used)",
        type, kernels, gemms, pools > 0 ? fmt::format(", {} NHWC pool(s)", pools) : "",
        plan_.softmax_node >= 0 ? ", softmax_forward" : "");
    summary_ += fmt::format(
        "\ntensor-core general: weights and biases rounded to {} and packed once; fp32 sums over k in order; every "
        "layer's output rounded to {} (and its activation's), stored {} between layers (images as NHWC pixels, "
        "channels padded to 8); same bits for any tile and batch",
        type, type, type);
    for (size_t i = 0; i < plan_.layers.size(); ++i) {
      TcgLayer& l = plan_.layers[i];
      Step step;
      step.rows_per_image = l.rows_per_image;
      const void* x = l.in_buffer < 0 ? static_cast<const void*>(device_value(plan_.input_value))
                                      : acts_[size_t(l.in_buffer)].data();
      void* y = !l.last ? static_cast<void*>(acts_[size_t(l.out_buffer)].data() + l.out_offset)
                : plan_.softmax_node >= 0 ? static_cast<void*>(logits_.data())
                                          : static_cast<void*>(device_value(plan_.output_value));
      if (l.kind == TcgKind::Pool) {
        step.is_pool = true;
        TcPoolArgs& p = step.pool;
        p.x = static_cast<const uint16_t*>(x);
        p.y = static_cast<uint16_t*>(y);
        p.h = l.conv.h, p.w = l.conv.w, p.oh = l.conv.oh, p.ow = l.conv.ow, p.pitch = l.conv.pitch;
        p.kh = l.conv.kh, p.kw = l.conv.kw, p.sh = l.conv.sh, p.sw = l.conv.sw, p.pt = l.conv.pt, p.pl = l.conv.pl;
        p.average = l.average, p.count_include_pad = l.count_include_pad;
        steps_.push_back(step);
        summary_ += fmt::format("\n  {}: tc_pool_forward {} NHWC {}x{} -> {}x{}, {} channels of {}", l.context,
                                type, l.conv.h, l.conv.w, l.conv.oh, l.conv.ow, l.units, l.ldy);
        continue;
      }
      TcDenseArgs& a = step.gemm;
      a.x_f32 = l.first;
      a.ldx = l.ldx;
      a.k = l.kind == TcgKind::Conv || l.first ? l.in_features : l.ldx;
      a.y_f32 = l.last;
      a.ldy = l.ldy;
      a.cols = l.cols;
      a.k_padded = l.k_padded;
      a.act = l.act;
      if (l.kind == TcgKind::Conv) a.conv = l.conv;
      if (l.res_buffer >= 0) {
        a.res = acts_[size_t(l.res_buffer)].data();
        a.ldres = l.res_pitch;
        a.post_act = l.post_act;
      }
      a.x = x;
      a.y = y;
      a.w = upload(l.weight, "weights of " + l.context);
      a.bias = upload(l.bias, "bias of " + l.context);
      l.weight.clear();
      l.weight.shrink_to_fit();
      steps_.push_back(step);
      const std::string input =
          l.first ? std::string("fp32 rounded while staged")
          : l.kind == TcgKind::Conv ? fmt::format("{} NHWC {}x{} pixels of {}", type, l.conv.h, l.conv.w, l.conv.pitch)
                                    : fmt::format("{} rows of {}", type, l.ldx);
      summary_ += fmt::format(
          "\n  {}: tc_dense_forward {} M = batch{} N = {} K = {} padded to {}, input {}, output {}; tile {} at batch "
          "{}, {} at batch 1",
          l.context, type, l.rows_per_image > 1 ? fmt::format(" x {}", l.rows_per_image) : "", l.units,
          l.in_features, l.k_padded, input,
          l.last ? "fp32"
          : l.out_offset > 0 || l.cols != l.ldy
              ? fmt::format("{} rows of {} at column {}", type, l.ldy, l.out_offset)
              : fmt::format("{} rows of {}", type, l.ldy),
          tcg_tile_name(tile_for(step, max_batch_)),
          max_batch_, tcg_tile_name(tile_for(step, 1)));
    }
    if (plan_.softmax_node >= 0)
      summary_ += fmt::format("\n  node '{}' (softmax): softmax_forward (fp32, one warp per row)",
                              graph_.nodes[size_t(plan_.softmax_node)].node->name);
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading the tensor-core general path's weights");
  }

  void forward(int n) override {
    const TcgOperands ops = plan_.bf16 ? TcgOperands::BF16 : TcgOperands::FP16;
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      if (s.is_pool) tc_pool_forward(s.pool, ops, n, stream(), plan_.layers[i].context);
      else tc_dense_forward(s.gemm, ops, tile_for(s, n), n * s.rows_per_image, stream(), plan_.layers[i].context);
    }
    if (plan_.softmax_node >= 0)
      softmax_forward(logits_.data(), device_value(plan_.output_value), n, plan_.layers.back().units, softmax_,
                      stream(), "tensor-core general path: softmax");
  }
  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override { return path_; }

 private:
  // One layer's launch: a GEMM (dense, conv2d) or a maxpool.
  struct Step {
    bool is_pool = false;
    int rows_per_image = 1;
    TcDenseArgs gemm;
    TcPoolArgs pool;
  };

  int tile_for(const Step& s, int n) const {
    return forced_tile_ ? *forced_tile_ : choose_tcg_tile((long long)n * s.rows_per_image, s.gemm.cols, sms_);
  }

  template <class E>
  const E* upload(const std::vector<E>& host, const std::string& what) {
    gpu::DeviceBuffer<E> buffer(host.size(), what);
    CUDA_CHECK_CTX(cudaMemcpyAsync(buffer.data(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice, stream()),
                   "uploading the " + what);
    const E* p = buffer.data();
    if constexpr (sizeof(E) == 2) halves_.push_back(std::move(buffer));
    else floats_.push_back(std::move(buffer));
    return p;
  }

  TcgPlan plan_;
  std::optional<int> forced_tile_;
  int sms_;
  std::vector<gpu::DeviceBuffer<uint16_t>> acts_;
  gpu::DeviceBuffer<float> logits_;
  SoftmaxLaunch softmax_;
  std::vector<Step> steps_;
  std::vector<gpu::DeviceBuffer<uint16_t>> halves_;
  std::vector<gpu::DeviceBuffer<float>> floats_;
  std::string path_;
  std::string summary_;
};

}  // namespace

std::unique_ptr<Executable> make_tc_general_executable(const Graph& graph, TcgPlan plan, const CompileOptions& options,
                                                       const TcGeneralOptions& tcg_options, int multiprocessors,
                                                       std::string header, std::string why_not_chain) {
  const Graph fused = fuse_groups(graph, {FusionGroup{plan.nodes, "tensor-core general path"}});
  return std::make_unique<TcGeneralExecutable>(fused, std::move(plan), options, tcg_options, multiprocessors,
                                               std::move(header), std::move(why_not_chain));
}

}  // namespace engine::custom::tcg

#include "engine/custom/tc_general/tc_general_executable.hpp"

#include <fmt/format.h>

#include <algorithm>
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
    int pitch = 0;
    for (const TcgLayer& l : plan_.layers)
      if (!l.last) pitch = std::max(pitch, l.ldy);
    if (pitch > 0) {
      for (auto& b : acts_) {
        b = gpu::DeviceBuffer<uint16_t>(size_t(pitch) * size_t(max_batch_), "tensor-core general activations");
        // All-ones bits are a NaN in fp16 and bf16: a value a layer forgets to write shows downstream.
        CUDA_CHECK_CTX(cudaMemsetAsync(b.data(), 0xff, b.bytes(), stream()), "poisoning the activation buffers");
      }
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
        "\npath: tensor-core general {} ({} kernel(s): {} dense GEMM(s) on mma.sync m16n8k16 with fused epilogues{}; "
        "the per-node kernels are not used)",
        type, kernels, plan_.layers.size(), plan_.softmax_node >= 0 ? ", softmax_forward" : "");
    summary_ += fmt::format(
        "\ntensor-core general: weights and biases rounded to {} and packed once; fp32 sums over k in order; every "
        "layer's output rounded to {} (and its activation's), stored {} between layers; same bits for any tile and "
        "batch",
        type, type, type);
    for (size_t i = 0; i < plan_.layers.size(); ++i) {
      TcgLayer& l = plan_.layers[i];
      TcDenseArgs a;
      a.x_f32 = l.first;
      a.ldx = l.ldx;
      a.k = l.first ? l.in_features : l.ldx;
      a.y_f32 = l.last;
      a.ldy = l.ldy;
      a.cols = l.last ? l.units : l.ldy;
      a.k_padded = l.k_padded;
      a.act = l.act;
      a.x = l.first ? static_cast<const void*>(device_value(plan_.input_value)) : acts_[(i + 1) % 2].data();
      a.y = !l.last ? static_cast<void*>(acts_[i % 2].data())
            : plan_.softmax_node >= 0 ? static_cast<void*>(logits_.data())
                                      : static_cast<void*>(device_value(plan_.output_value));
      a.w = upload(l.weight, "weights of " + l.context);
      a.bias = upload(l.bias, "bias of " + l.context);
      l.weight.clear();
      l.weight.shrink_to_fit();
      args_.push_back(a);
      summary_ += fmt::format(
          "\n  {}: tc_dense_forward {} M = batch N = {} K = {} padded to {}, input {}, output {}; tile {} at batch {}, "
          "{} at batch 1",
          l.context, type, l.units, l.in_features, l.k_padded,
          l.first ? "fp32 rounded while staged" : fmt::format("{} rows of {}", type, l.ldx),
          l.last ? "fp32" : fmt::format("{} rows of {}", type, l.ldy), tcg_tile_name(tile_for(a, max_batch_)),
          max_batch_, tcg_tile_name(tile_for(a, 1)));
    }
    if (plan_.softmax_node >= 0)
      summary_ += fmt::format("\n  node '{}' (softmax): softmax_forward (fp32, one warp per row)",
                              graph_.nodes[size_t(plan_.softmax_node)].node->name);
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading the tensor-core general path's weights");
  }

  void forward(int n) override {
    const TcgOperands ops = plan_.bf16 ? TcgOperands::BF16 : TcgOperands::FP16;
    for (size_t i = 0; i < args_.size(); ++i)
      tc_dense_forward(args_[i], ops, tile_for(args_[i], n), n, stream(), plan_.layers[i].context);
    if (plan_.softmax_node >= 0)
      softmax_forward(logits_.data(), device_value(plan_.output_value), n, plan_.layers.back().units, softmax_,
                      stream(), "tensor-core general path: softmax");
  }
  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override { return path_; }

 private:
  int tile_for(const TcDenseArgs& a, int n) const { return forced_tile_ ? *forced_tile_ : choose_tcg_tile(n, a.cols, sms_); }

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
  gpu::DeviceBuffer<uint16_t> acts_[2];
  gpu::DeviceBuffer<float> logits_;
  SoftmaxLaunch softmax_;
  std::vector<TcDenseArgs> args_;
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

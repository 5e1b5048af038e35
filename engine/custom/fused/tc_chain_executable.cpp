#include "engine/custom/fused/tc_chain_executable.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "engine/custom/fused/tc_chain_launch.hpp"
#include "engine/gpu/gpu_executable.hpp"

namespace engine::custom::tc {
namespace {

class TcChainExecutable final : public gpu::GpuExecutable {
 public:
  TcChainExecutable(const Graph& fused_graph, TcChainPlan plan, const CompileOptions& options,
                    const TcChainOptions& tc_options, int multiprocessors, std::string header)
      : GpuExecutable(fused_graph, options), plan_(std::move(plan)) {
    choice_.bf16 = plan_.bf16;
    // The defaults: version 2, tanh.approx, the model's signature, adaptive tiles (TcChainOptions).
    choice_.version = tc_options.one_warp_per_tile && !plan_.int8 ? 1 : 2;
    choice_.fast_tanh = !tc_options.accurate_tanh;
    choice_.signature = tc_options.generic_kernel ? kSigGeneric : plan_.signature;
    choice_.adaptive_tile = !tc_options.fixed_tiles;
    if (plan_.int8) {
      setup_int8(multiprocessors, std::move(header));
      return;
    }
    TcChainParams& P = plan_.params;
    P.c1 = upload(plan_.c1, "c1 weights");
    P.c1_bias = upload(plan_.c1_bias, "c1 bias");
    P.c3 = upload(plan_.c3, "c3 weights");
    P.c3_bias = upload(plan_.c3_bias, "c3 bias");
    P.f5 = upload(plan_.f5, "f5 weights");
    P.f5_bias = upload(plan_.f5_bias, "f5 bias");
    P.f6 = upload(plan_.f6, "f6 weights");
    P.f6_bias = upload(plan_.f6_bias, "f6 bias");
    P.f7 = upload(plan_.f7, "f7 weights");
    P.f7_bias = upload(plan_.f7_bias, "f7 bias");
    const int per_sm = tc_chain_prepare(choice_, "tensor-core chain: shared-memory limit");
    if (per_sm < 1)
      throw gpu::CudaError(fmt::format("tensor-core chain: a block with {} KiB of shared memory cannot be resident",
                                       tc_chain_smem_bytes(choice_) / 1024));
    blocks_ = per_sm * multiprocessors;
    in_ = device_value(plan_.input_value);
    out_ = device_value(plan_.output_value);
    const char* type = plan_.bf16 ? "bf16" : "fp16";
    summary_ = std::move(header);
    summary_ += fmt::format(
        "\npath: tensor-core chain (1 kernel; mma.sync m16n8k16, {} operands, fp32 sums; the per-node kernels are "
        "not used)\n  layers: {}\n  weights converted to {} once, padded to 8/16 channels and 128/96/16 units; "
        "activations stored as {} between layers, pooled in fp32; {}\n  kernel version {}: {} warps per block, {:.1f} "
        "KiB shared memory, {} block(s) per SM x {} SMs, {}; {}",
        type, plan_.layers, type, type,
        choice_.fast_tanh ? "tanh.approx.f32 (relative error ~2^-11, the size of fp16's rounding)" : "accurate tanhf",
        choice_.version, tc_chain_threads(choice_) / 32, tc_chain_smem_bytes(choice_) / 1024.0, per_sm,
        multiprocessors,
        tiles_text(), signature_text());
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading the tensor-core chain's weights");
  }

  void forward(int n) override {
    if (plan_.int8) {
      tc_int8_forward(choice_, plan_.qparams, in_, out_, n, blocks_, stream(), "tensor-core chain (int8)");
      return;
    }
    tc_chain_forward(choice_, plan_.params, in_, out_, n, blocks_, stream(), "tensor-core chain");
  }
  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override {
    return fmt::format("tensor-core chain ({}, 1 kernel)", plan_.int8 ? "int8" : plan_.bf16 ? "bf16" : "fp16");
  }

 private:
  std::string tiles_text() const {
    if (choice_.version != 2 || !choice_.adaptive_tile) return "tiles of 16 images";
    return fmt::format("tiles of 16 images from batch {} on, fewer below (2 at batch <= {}) so that every pair of "
                       "warps has work",
                       16 * (blocks_ * (kPairWarps / 2) - 1) + 1, 2 * blocks_ * (kPairWarps / 2));
  }
  std::string signature_text() const {
    return choice_.signature == kSigTanhAvg   ? "compiled for tanh + average pools (the model's signature)"
           : choice_.signature == kSigReluMax ? "compiled for relu + max pools (the model's signature)"
                                              : "activations and pools read from the parameters (generic kernel)";
  }

  void setup_int8(int multiprocessors, std::string header) {
    TcInt8Params& Q = plan_.qparams;
    Q.c1 = upload(plan_.q_c1, "c1 weights");
    Q.c3 = upload(plan_.q_c3, "c3 weights");
    Q.f5 = upload(plan_.q_f5, "f5 weights");
    Q.f6 = upload(plan_.q_f6, "f6 weights");
    Q.f7 = upload(plan_.q_f7, "f7 weights");
    Q.c1_scale = upload(plan_.c1_scale, "c1 scales");
    Q.c1_bias = upload(plan_.c1_bias, "c1 bias");
    Q.c3_scale = upload(plan_.c3_scale, "c3 scales");
    Q.c3_bias = upload(plan_.c3_bias, "c3 bias");
    Q.f5_scale = upload(plan_.f5_scale, "f5 scales");
    Q.f5_bias = upload(plan_.f5_bias, "f5 bias");
    Q.f6_scale = upload(plan_.f6_scale, "f6 scales");
    Q.f6_bias = upload(plan_.f6_bias, "f6 bias");
    Q.f7_scale = upload(plan_.f7_scale, "f7 scales");
    Q.f7_bias = upload(plan_.f7_bias, "f7 bias");
    const int per_sm = tc_int8_prepare(choice_, "tensor-core chain (int8): shared-memory limit");
    if (per_sm < 1)
      throw gpu::CudaError(fmt::format("tensor-core chain (int8): a block with {} KiB of shared memory cannot be "
                                       "resident",
                                       kQSmemBytes / 1024));
    blocks_ = per_sm * multiprocessors;
    in_ = device_value(plan_.input_value);
    out_ = device_value(plan_.output_value);
    summary_ = std::move(header);
    summary_ += fmt::format(
        "\npath: tensor-core chain (1 kernel; mma.sync m16n8k32, int8 operands, exact int32 sums; the per-node "
        "kernels are not used)\n  layers: {}\n  each conv and dense input quantized per tensor with the calibration's "
        "range (scales {:.4g} {:.4g} {:.4g} {:.4g} {:.4g}), weights per output channel, once; bias, activations, "
        "pooling and softmax in fp32; {}\n  {} warps per block, {:.1f} KiB shared memory, {} block(s) per SM x {} "
        "SMs, {}; {}",
        plan_.layers, Q.in_scale[0], Q.in_scale[1], Q.in_scale[2], Q.in_scale[3], Q.in_scale[4],
        choice_.fast_tanh ? "tanh.approx.f32" : "accurate tanhf", kQPairs * 2, kQSmemBytes / 1024.0, per_sm,
        multiprocessors, tiles_text(), signature_text());
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading the tensor-core chain's weights");
  }

  template <class E>
  const E* upload(const std::vector<E>& host, const char* what) {
    gpu::DeviceBuffer<E> buffer(host.size(), std::string("tensor-core chain ") + what);
    CUDA_CHECK_CTX(cudaMemcpyAsync(buffer.data(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice, stream()),
                   std::string("uploading the tensor-core chain's ") + what);
    const E* p = buffer.data();
    if constexpr (sizeof(E) == 1) bytes_.push_back(std::move(buffer));
    else if constexpr (sizeof(E) == 2) halves_.push_back(std::move(buffer));
    else floats_.push_back(std::move(buffer));
    return p;
  }

  TcChainPlan plan_;
  TcKernelChoice choice_;
  std::vector<gpu::DeviceBuffer<int8_t>> bytes_;
  std::vector<gpu::DeviceBuffer<uint16_t>> halves_;
  std::vector<gpu::DeviceBuffer<float>> floats_;
  const float* in_ = nullptr;
  float* out_ = nullptr;
  int blocks_ = 1;
  std::string summary_;
};

}  // namespace

std::unique_ptr<Executable> make_tc_chain_executable(const Graph& graph, TcChainPlan plan,
                                                     const CompileOptions& options, const TcChainOptions& tc_options,
                                                     int multiprocessors, std::string header) {
  const Graph fused = fuse_groups(graph, {FusionGroup{plan.nodes, "tensor-core chain"}});
  return std::make_unique<TcChainExecutable>(fused, std::move(plan), options, tc_options, multiprocessors,
                                             std::move(header));
}

}  // namespace engine::custom::tc

#include "engine/custom/fused/fused_executable.hpp"

#include <fmt/format.h>

#include <vector>

#include "engine/gpu/gpu_executable.hpp"

namespace engine::custom::fused {
namespace {

class FusedExecutable final : public gpu::GpuExecutable {
 public:
  FusedExecutable(const Graph& fused_graph, FusedPlan plan, const CompileOptions& options, const DeviceShape& device,
                  std::string header)
      : GpuExecutable(fused_graph, options), plan_(std::move(plan)) {
    summary_ = std::move(header);
    summary_ += fmt::format("\narena: {} floats/sample x {} = {:.2f} MiB (only the chains' inputs and outputs)",
                            graph_.arena_floats_per_sample, max_batch_,
                            double(graph_.arena_floats_per_sample) * max_batch_ * 4 / (1 << 20));
    if (plan_.has_conv) {
      conv_weights_ = upload(plan_.conv_weights, "fused conv chain weights");
      const int bytes = plan_.conv.smem_floats * 4;
      conv_chain_prepare(bytes, "fused conv chain: shared-memory limit");
      const int per_sm = conv_chain_blocks_per_sm(bytes);
      if (per_sm < 1)
        throw gpu::CudaError(fmt::format("fused conv chain: a block with {} KiB of shared memory cannot be resident",
                                         bytes / 1024));
      conv_blocks_ = per_sm * device.multiprocessors;
      conv_in_ = device_value(plan_.conv_input_value);
      conv_out_ = device_value(plan_.conv_output_value);
      plan_.summary.insert(plan_.summary.begin(),
                           fmt::format("path: fused ({} kernel{}; the per-node kernels are not used)",
                                       plan_.has_dense ? 2 : 1, plan_.has_dense ? "s" : ""));
      plan_.summary.push_back(fmt::format("  grid: {} resident block(s) per SM x {} SMs, each looping over tiles",
                                          per_sm, device.multiprocessors));
    } else {
      plan_.summary.insert(plan_.summary.begin(), "path: fused (1 kernel; the per-node kernels are not used)");
    }
    if (plan_.has_dense) {
      for (int l = 0; l < plan_.dense.layer_count; ++l) {
        const DenseWeights& w = plan_.dense_weights[size_t(l)];
        plan_.dense.layers[l].weight_t = upload(w.weight_t, fmt::format("fused dense layer {} weights", l));
        plan_.dense.layers[l].bias = upload(w.bias, fmt::format("fused dense layer {} bias", l));
      }
      const int bytes = plan_.dense.smem_floats * 4;
      dense_chain_prepare(bytes, "fused dense chain: shared-memory limit");
      const int per_sm = dense_chain_blocks_per_sm(bytes);
      if (per_sm < 1)
        throw gpu::CudaError(fmt::format("fused dense chain: a block with {} KiB of shared memory cannot be resident",
                                         bytes / 1024));
      dense_blocks_ = per_sm * device.multiprocessors;
      dense_in_ = device_value(plan_.dense_input_value);
      dense_out_ = device_value(plan_.dense_output_value);
    }
    for (const std::string& line : plan_.summary) summary_ += "\n" + line;
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading the fused path's weights");
  }

  void forward(int n) override {
    if (plan_.has_conv)
      conv_chain_forward(plan_.conv, conv_weights_, conv_in_, conv_out_, n, conv_blocks_, stream(), "fused conv chain");
    if (plan_.has_dense)
      dense_chain_forward(plan_.dense, dense_in_, dense_out_, n, dense_blocks_, stream(), "fused dense chain");
  }

  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override {
    return fmt::format("fused ({})", plan_.has_conv && plan_.has_dense ? "conv chain + dense chain kernels"
                                     : plan_.has_conv                  ? "conv chain kernel"
                                                                       : "dense chain kernel");
  }

 private:
  const float* upload(const std::vector<float>& host, const std::string& what) {
    gpu::DeviceBuffer<float> buffer(host.size(), what);
    // On our non-blocking stream; the constructor waits once after the last upload.
    CUDA_CHECK_CTX(cudaMemcpyAsync(buffer.data(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice, stream()),
                   "uploading " + what);
    buffers_.push_back(std::move(buffer));
    return buffers_.back().data();
  }

  FusedPlan plan_;
  std::vector<gpu::DeviceBuffer<float>> buffers_;
  const float* conv_weights_ = nullptr;
  const float* conv_in_ = nullptr;
  float* conv_out_ = nullptr;
  const float* dense_in_ = nullptr;
  float* dense_out_ = nullptr;
  int conv_blocks_ = 1, dense_blocks_ = 1;
  std::string summary_;
};

}  // namespace

std::unique_ptr<Executable> make_fused_executable(const Graph& graph, FusedPlan plan, const CompileOptions& options,
                                                  const DeviceShape& device, std::string header) {
  const Graph fused = fuse_groups(graph, plan.groups);
  return std::make_unique<FusedExecutable>(fused, std::move(plan), options, device, std::move(header));
}

}  // namespace engine::custom::fused

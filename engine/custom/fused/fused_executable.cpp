#include "engine/custom/fused/fused_executable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "engine/gpu/gpu_executable.hpp"

namespace engine::custom::fused {
namespace {

// The largest batch the image chain runs by default: 12 images per SM. On a 132-SM GPU the image
// chain wins up to between 1,024 and 2,048 images, where the tiled kernels' larger work items take
// over (docs/design/custom-fused.md). ImageChainOptions picks another limit, the largest cluster, the
// general cluster kernel and the conv items' split rule; the bits are the same every way.
constexpr int kImageImagesPerSm = 12;

class FusedExecutable final : public gpu::GpuExecutable {
 public:
  FusedExecutable(const Graph& fused_graph, FusedPlan plan, const CompileOptions& options,
                  const ImageChainOptions& image_options, const DeviceShape& device, std::string header)
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
      if (plan_.handoff_floats > 0) {
        handoff_ = gpu::DeviceBuffer<float>(size_t(plan_.handoff_floats) * size_t(max_batch_),
                                            "fused conv chain -> dense chain hand-off");
        conv_out_ = handoff_.data();
        summary_ += fmt::format("\nhand-off between the chains (tiled kernels): {} floats/sample x {} = {:.2f} MiB",
                                plan_.handoff_floats, max_batch_,
                                double(plan_.handoff_floats) * max_batch_ * 4 / (1 << 20));
      } else {
        conv_out_ = device_value(plan_.conv_output_value);
      }
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
      dense_in_ = plan_.handoff_floats > 0 ? handoff_.data() : device_value(plan_.dense_input_value);
      dense_out_ = device_value(plan_.dense_output_value);
    }
    if (plan_.has_image) {
      if (plan_.has_conv) image_conv_weights_ = upload(plan_.image_conv_weights, "image chain conv weights");
      for (int l = 0; l < plan_.image.dense.layer_count; ++l) {  // the tiled dense chain's uploads
        DenseLayer& L = plan_.image.dense.layers[l];
        L.weight_t = plan_.dense.layers[l].weight_t;
        L.bias = plan_.dense.layers[l].bias;
        // And the image chain's own copy, unit-major: a unit's k steps contiguous (float4 reads).
        const std::vector<float>& t = plan_.dense_weights[size_t(l)].weight_t;
        std::vector<float> u(t.size());
        for (size_t k = 0; k < size_t(L.in_padded); ++k)
          for (size_t j = 0; j < size_t(L.units_padded); ++j)
            u[j * size_t(L.in_padded) + k] = t[k * size_t(L.units_padded) + j];
        L.weight_u = upload(u, fmt::format("image chain dense layer {} weights", l));
      }
      const int bytes = plan_.image.smem_floats * 4;
      image_chain_prepare(bytes, "fused image chain: shared-memory limit");
      const int per_sm = image_chain_blocks_per_sm(bytes);
      if (per_sm >= 1) {
        image_blocks_ = per_sm * device.multiprocessors;
        image_max_ = image_options.max_batch.value_or(kImageImagesPerSm * device.multiprocessors);
        // The largest cluster asked for that the device can launch, and how many of each size fit at once.
        const int want = std::max(1, std::min(kImageMaxCluster, image_options.max_cluster));
        image_cluster_ = 1;
        for (int size = 2; size <= want; size *= 2) {
          cluster_capacity_[size] = image_chain_cluster_capacity(bytes, size);
          if (cluster_capacity_[size] >= 1) image_cluster_ = size;
        }
        multiprocessors_ = device.multiprocessors;
        if (image_options.conv_split_items || image_options.conv_split_blocks) {
          plan_.image.conv_split_items = image_options.conv_split_items.value_or(plan_.image.conv_split_items);
          plan_.image.conv_split_blocks = image_options.conv_split_blocks.value_or(plan_.image.conv_split_blocks);
          plan_image_conv_setup(plan_.image);
        }
        // Clusters of 8 blocks (the largest; an image per 8 SMs) take conv items of one output
        // channel where a block's items then fit its threads (image_chain.cu's split_conv_items).
        const bool split = plan_.image.has_conv && plan_.image.conv_split_items > 0 &&
                           image_cluster_ >= std::max(2, plan_.image.conv_split_blocks);
        const std::string split_text =
            split ? fmt::format("; clusters of {}+ blocks split conv items to one output channel where a block's "
                                "items then fit its {} threads",
                                std::max(2, plan_.image.conv_split_blocks), std::min(kImageThreads, plan_.image.conv_split_items))
                  : "";
        bool chunked = false;
        for (int l = 0; plan_.image.has_dense && l < plan_.image.dense.layer_count; ++l)
          chunked = chunked || plan_.image.dense.layers[l].chunk_rows < plan_.image.dense.layers[l].in_padded;
        const std::string chunk_text = chunked && image_cluster_ > 1
                                           ? "; clusters sum a dense layer's chunks on one warp each where a block's units "
                                             "fit one warp and one weight slice"
                                           : "";
        for (int s = 0; s < 4; ++s) plan_.image.tail_runs[s] = image_tail_runs(plan_.image, 1 << s);
        const int tail_runs = image_cluster_ > 1 ? plan_.image.tail_runs[std::countr_zero(unsigned(image_cluster_))] : 0;
        const std::string tail_text =
            tail_runs > 0 ? fmt::format("; clusters of {} sum the last dense layer's {} chunks in the blocks that "
                                        "computed their inputs, block 0 adding them",
                                        image_cluster_, tail_runs)
                          : "";
        // The cluster kernel: the one specialised for this chain where it qualifies (a fraction of the
        // general kernel's code: the instruction caches start cold at each launch), or the general one
        // where the options ask for it (same bits).
        const std::string kernel_why = plan_image_cluster_kernel(plan_.image, image_options.general_cluster_kernel);
        const std::string kernel_text = image_cluster_ > 1 ? "; clusters run " + kernel_why : "";
        plan_.summary.push_back(fmt::format(
            "fused image chain for batches <= {}: 1 kernel, 1 image per block, {} threads, {:.1f} KiB shared memory, "
            "{} block(s) per SM ({} output channels x {} rows per thread; dense weights staged in {} KiB slices); "
            "{}{}{}{}{}{}; the same bits as the kernels above",
            image_max_, kImageThreads, double(bytes) / 1024, per_sm, kImageOcb, kImageRowsPerThread,
            kImageSliceFloats * 4 / 1024, cluster_text(),
            plan_.image.flatten_in_place ? "; the first dense layer reads the conv output in place" : "", split_text,
            chunk_text, tail_text, kernel_text));
      } else {
        plan_.summary.push_back(fmt::format("no image chain: a block with {} KiB of shared memory cannot be resident",
                                            bytes / 1024));
      }
    } else {
      plan_.summary.push_back("no image chain for small batches: " + plan_.image_why);
    }
    for (const std::string& line : plan_.summary) summary_ += "\n" + line;
    CUDA_CHECK_CTX(cudaStreamSynchronize(stream()), "uploading the fused path's weights");
  }

  void forward(int n) override {
    if (n <= image_max_) {
      // Few images: each on a cluster of blocks, the largest size whose n clusters all run at once
      // (each block on its own SM).
      int cluster = image_cluster_;
      while (cluster > 1 && (n > cluster_capacity_[cluster] || int64_t(n) * cluster > multiprocessors_)) cluster /= 2;
      image_chain_forward(plan_.image, image_conv_weights_, plan_.has_conv ? conv_in_ : dense_in_,
                          plan_.has_dense ? dense_out_ : conv_out_, n, image_blocks_, cluster, stream(),
                          "fused image chain");
      return;
    }
    if (plan_.has_conv)
      conv_chain_forward(plan_.conv, conv_weights_, conv_in_, conv_out_, n, conv_blocks_, stream(), "fused conv chain");
    if (plan_.has_dense)
      dense_chain_forward(plan_.dense, dense_in_, dense_out_, n, dense_blocks_, stream(), "fused dense chain");
  }

  std::string plan_summary() const override { return summary_; }

  // Which cluster size forward() picks for a batch, as the plan summary states it.
  std::string cluster_text() const {
    std::string text;
    int from = 1;
    for (int size = image_cluster_; size > 1; size /= 2) {
      const int upto = std::min(cluster_capacity_[size], multiprocessors_ / size);
      if (upto < from) continue;
      text += fmt::format("{}{} image(s): a cluster of {} blocks per image", text.empty() ? "" : ", ",
                          upto == from ? std::to_string(from) : fmt::format("{}-{}", from, upto), size);
      from = upto + 1;
    }
    return text.empty() ? "no clusters (one block per image)" : "batches of " + text;
  }
  std::string execution_path() const override {
    const std::string image = image_max_ > 0 ? fmt::format("; the image chain kernel for batches <= {}", image_max_) : "";
    return fmt::format("fused ({}{})",
                       plan_.has_conv && plan_.has_dense ? "conv chain + dense chain kernels"
                       : plan_.has_conv                  ? "conv chain kernel"
                                                         : "dense chain kernel",
                       image);
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
  gpu::DeviceBuffer<float> handoff_;  // [max_batch][handoff_floats] when both chains run
  const float* conv_weights_ = nullptr;
  const float* image_conv_weights_ = nullptr;
  int image_blocks_ = 0, image_max_ = 0;  // image_max_ 0: never
  int image_cluster_ = 1, multiprocessors_ = 1;
  int cluster_capacity_[kImageMaxCluster + 1] = {};  // by cluster size: clusters the device runs at once
  const float* conv_in_ = nullptr;
  float* conv_out_ = nullptr;
  const float* dense_in_ = nullptr;
  float* dense_out_ = nullptr;
  int conv_blocks_ = 1, dense_blocks_ = 1;
  std::string summary_;
};

}  // namespace

std::unique_ptr<Executable> make_fused_executable(const Graph& graph, FusedPlan plan, const CompileOptions& options,
                                                  const ImageChainOptions& image_options, const DeviceShape& device,
                                                  std::string header) {
  const Graph fused = fuse_groups(graph, plan.groups);
  return std::make_unique<FusedExecutable>(fused, std::move(plan), options, image_options, device, std::move(header));
}

}  // namespace engine::custom::fused

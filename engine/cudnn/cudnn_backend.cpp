// The "cudnn" backend: cuDNN 9 for convolution, pooling, activations, softmax and add; cuBLAS for
// dense; the shared GPU runtime (engine/gpu) for upload, uint8 preprocessing on the device, download.
//
// API choice: cuDNN's C API (cudnn.h: cudnnConvolutionForward & co.), not the graph API.
// - No package of NVIDIA's header-only cudnn-frontend is at hand (the Debian lists have none; the
//   PyPI wheel is the Python binding), and writing the graph API against the raw backend descriptors
//   (cudnnBackend*) is several hundred lines per fused pattern.
// - The graph API's execution plans are built for fixed tensor dimensions: a run whose last batch is
//   partial would need a plan per batch size, each finalised (and possibly JIT-compiled) on first use,
//   inside a run. The C API's tensor descriptors are re-described per batch size on the host in
//   microseconds, and one algorithm + one workspace serve every n.
// - Everything this engine needs (conv + bias + relu fusion, symmetric padding, FMA-only math for real
//   fp32, deterministic algorithm filtering, max/avg pooling with both divisor rules, accurate softmax)
//   is in the C API. It is marked deprecated in cuDNN 9 headers but is shipped and supported by every
//   cuDNN 9 release; CUDNN_WARN_DEPRECATED is not defined, so it compiles without warnings. A move to
//   the graph API (cudnn-frontend) would replace conv.cpp's algorithm selection with engine heuristics
//   and keep the Step structure.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/registry.hpp"
#include "engine/cudnn/cudnn_executable.hpp"
#include "engine/cudnn/cudnn_options.hpp"
#include "engine/cudnn/steps.hpp"
#include "engine/cudnn/train/cudnn_trainer.hpp"
#include "engine/gpu/device.hpp"
#include "engine/gpu/device_executable.hpp"
#include "engine/gpu/precision_choice.hpp"

namespace engine::cudnn {
namespace {

// Why the backend cannot run here: no GPU, or a cuDNN of another major version than compiled for.
std::optional<std::string> unavailable_reason() {
  if (auto why = gpu::no_gpu_reason()) return why;
  const size_t loaded = cudnnGetVersion();
  if (loaded / 10000 != CUDNN_MAJOR)
    return fmt::format("cuDNN {} is loaded but the engine was built for cuDNN {}", cudnn_version(), CUDNN_MAJOR);
  return std::nullopt;
}

class CudnnBackend final : public Backend {
 public:
  explicit CudnnBackend(const CudnnOptions& options) : options_(options) {}
  std::string name() const override { return "cudnn"; }
  int preferred_batch() const override { return 65536; }
  // fp16 / bf16: values and parameters stored in that type (NHWC), fp32 sums on tensor cores.
  // A reduced precision is a permission: the fastest precision it allows runs (engine/gpu/precision_choice.hpp).
  // int8 (int8.cpp): fp32 NHWC values; each conv2d / dense quantizes its input per tensor (the model's
  // calibration) and runs as cuDNN's INT8_EXT_CONFIG convolution / a cuBLAS int8 GEMM with int32 sums,
  // dequantized per output channel; the reference's int8 emulation is its oracle.
  bool supports(Precision) const override { return true; }
  std::string description() const override {
    std::string device = "no GPU";
    try {
      device = gpu::describe(gpu::current_device());
    } catch (const std::exception& e) {
      device = e.what();
    }
    return fmt::format("cuDNN {} + cuBLAS {} on {}", cudnn_version(), cublas_version(), device);
  }
  std::optional<std::string> unsupported(const formats::Node& node) const override {
    return unsupported_reason(node);
  }
  std::vector<std::string> devices() const override { return gpu::device_descriptions(); }
  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options) override {
    require_precision(*this, options);
    check_supported(*this, graph);
    if (options.precision == Precision::INT8 && !graph.model->calibration)
      throw std::invalid_argument(fmt::format("model '{}' has no calibration data, which int8 needs: run engine "
                                              "calibrate MODEL DATA -o OUT.json first",
                                              graph.model->name));
    // Handles, workspaces, algorithm choice and weights on the options' device, bound to it.
    return gpu::compile_on_device(options, [&]() -> std::unique_ptr<Executable> { return plan(graph, options); });
  }
  // Training (engine/cudnn/train/): every v1 op; fp32 with deterministic algorithms, on the current
  // device. Unavailable without a GPU: the registry reports the backend unavailable.
  std::optional<std::string> cannot_train() const override { return std::nullopt; }
  std::unique_ptr<TrainExecutable> compile_training(const Graph& graph, const TrainOptions& options) override {
    check_supported(*this, graph);
    return train::make_cudnn_trainer(graph, options);
  }

 private:
  // The executable at the precision asked, or (PrecisionChoice::Fastest) the fastest of those it
  // allows (engine/gpu/precision_choice.hpp), each timed at max_batch.
  std::unique_ptr<CudnnExecutable> plan(const Graph& graph, const CompileOptions& options) const {
    auto chosen = gpu::compile_fastest<CudnnExecutable>(
        options, options_.precision_choice,
        [&](const CompileOptions& at) { return std::make_unique<CudnnExecutable>(graph, at, options_); },
        [](CudnnExecutable& candidate) { return candidate.time_forward_ms(); });
    if (!chosen.note.empty()) chosen.exe->add_plan_note(chosen.note);
    return std::move(chosen.exe);
  }

  CudnnOptions options_;
};

}  // namespace

const char* int8_conv_name(CudnnOptions::Int8Conv tactic) {
  switch (tactic) {
    case CudnnOptions::Int8Conv::Cudnn: return "cudnn";
    case CudnnOptions::Int8Conv::Gemm: return "gemm";
    case CudnnOptions::Int8Conv::GemmT: return "gemm_t";
    case CudnnOptions::Int8Conv::Fastest: break;
  }
  return "";
}

std::unique_ptr<Backend> make_cudnn_backend(const CudnnOptions& options) {
  return std::make_unique<CudnnBackend>(options);
}

}  // namespace engine::cudnn

namespace engine {

void register_cudnn_backend(BackendRegistry& registry) {
  registry.add(BackendEntry{
      .name = "cudnn",
      .summary = "cuDNN 9 (conv, pooling, activations, softmax) + cuBLAS (dense) on the GPU; deterministic fp32 "
                 "by default",
      .priority = 10,
      .unavailable_reason = [] { return cudnn::unavailable_reason(); },
      .create = [] { return cudnn::make_cudnn_backend(); },
  });
}

}  // namespace engine

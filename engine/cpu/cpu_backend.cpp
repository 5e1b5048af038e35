// The "cpu" backend: fp32 SIMD kernels chosen at run time from the CPU's features (AVX-512F, else
// AVX2 + FMA, else the portable SSE2 ones), always available, the default when no GPU backend can run. Checked
// against the "reference" backend (tests/cpu/fast_*_test.cpp).
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/core/registry.hpp"
#include "engine/cpu/cpu_executable.hpp"
#include "engine/cpu/program.hpp"
#include "engine/cpu/train_f32.hpp"

namespace engine::cpu {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

bool has_avx2_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool has_avx512f() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return has_avx2_fma() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// The best kernels this CPU runs: AVX-512F, else AVX2+FMA, else the portable SSE2 ones.
// ENGINE_CPU_KERNELS=avx512|avx2|portable forces a set (tests run each; benchmarks compare them);
// one this CPU lacks is an error rather than a crash.
const KernelSet& pick_kernels() {
  const char* forced = std::getenv("ENGINE_CPU_KERNELS");
  const std::string want = forced ? forced : "";
  if (want == "portable") return kernels_portable();
  if (want == "avx2") {
    if (!has_avx2_fma()) throw std::runtime_error("cpu: ENGINE_CPU_KERNELS=avx2 but this CPU lacks AVX2 or FMA");
    return *kernels_avx2();
  }
  if (want == "avx512") {
    if (!has_avx512f()) throw std::runtime_error("cpu: ENGINE_CPU_KERNELS=avx512 but this CPU lacks AVX-512F");
    return *kernels_avx512();
  }
  if (!want.empty())
    throw std::runtime_error(fmt::format("cpu: ENGINE_CPU_KERNELS must be avx512, avx2 or portable, got '{}'", want));
  if (has_avx512f()) return *kernels_avx512();
  return has_avx2_fma() ? *kernels_avx2() : kernels_portable();
}

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    const std::string model = cpu_model_name();
    return fmt::format("fp32 SIMD ({}) on {} ({} threads by default)", pick_kernels().name,
                       model.empty() ? std::string("the host CPU") : model, omp_get_max_threads());
  }
  std::optional<std::string> unsupported(const formats::Node& node) const override {
    switch (node.op) {
      case OpType::Conv2D: case OpType::AvgPool: case OpType::MaxPool: case OpType::Relu:
      case OpType::Tanh: case OpType::Sigmoid: case OpType::Flatten: case OpType::Dense:
      case OpType::Softmax: case OpType::Add: case OpType::ScaleShift: case OpType::Concat:
        return std::nullopt;
    }
    return "op not implemented by the cpu backend";
  }
  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options) override {
    require_precision(*this, options);
    check_supported(*this, graph);
    return std::make_unique<CpuExecutable>(graph, options, pick_kernels());
  }
  std::optional<std::string> cannot_train() const override { return std::nullopt; }
  // The AVX2 build whenever the processor has it (same bits as the portable one, train_f32.hpp);
  // ENGINE_CPU_KERNELS=portable forces the portable one, as it does for inference.
  std::unique_ptr<TrainExecutable> compile_training(const Graph& graph, const TrainOptions& options) override {
    check_supported(*this, graph);
    if (!options.devices.empty())
      throw std::invalid_argument("backend 'cpu' trains on the host: --devices is for the GPU backends (custom, cudnn)");
    const char* forced = std::getenv("ENGINE_CPU_KERNELS");
    const bool portable = forced && std::string(forced) == "portable";
    return !portable && has_avx2_fma() ? make_trainer_f32_avx2(graph, options)
                                       : make_trainer_f32_portable(graph, options);
  }
};

}  // namespace
}  // namespace engine::cpu

namespace engine {

void register_cpu_backend(BackendRegistry& registry) {
  registry.add(BackendEntry{
      .name = "cpu",
      .summary = "fp32 SIMD on the host CPU (AVX-512, AVX2+FMA or portable, chosen at run time), tiles of images over threads",
      // Above the reference (0), below the GPU backends (10, 20): the default when no GPU is usable.
      .priority = 5,
      .unavailable_reason = [] { return std::optional<std::string>(); },
      .create = [] { return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>()); },
  });
}

}  // namespace engine

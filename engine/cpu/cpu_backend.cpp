// The "cpu" backend: fp32 SIMD kernels chosen at run time from the CPU's features (AVX-512F, else
// AVX2 + FMA, else the portable SSE2 ones; CpuOptions, ENGINE_CPU_KERNELS force a set), and int8
// products for --precision int8 (AVX-512 VNNI, else AVX2, else portable), always
// available, the default when no GPU backend can run. Checked against the "reference" backend
// (tests/cpu/fast_backend_test.cpp).
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/core/host_cpu.hpp"
#include "engine/core/registry.hpp"
#include "engine/cpu/cpu_executable.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "engine/cpu/int8/int8_executable.hpp"
#include "engine/cpu/program.hpp"
#include "engine/cpu/train_f32.hpp"

namespace engine::cpu {
namespace {

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

bool has_avx512_vnni() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return has_avx512f() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// The int8 products for `choice`: Avx512 needs AVX-512 VNNI, Avx2 AVX2; Best takes VNNI, else AVX2,
// else the portable ones (int8/int8_gemm.hpp: the same bits from each).
const int8::Int8Gemm& pick_int8_gemm(CpuOptions::Kernels choice) {
  using Kernels = CpuOptions::Kernels;
  switch (choice) {
    case Kernels::Portable:
      return int8::int8_gemm_portable();
    case Kernels::Avx2:
      if (!has_avx2_fma()) throw std::runtime_error("cpu: the avx2 kernels were asked for but this CPU lacks AVX2 or FMA");
      return *int8::int8_gemm_avx2();
    case Kernels::Avx512:
      if (!has_avx512_vnni())
        throw std::runtime_error("cpu: the avx512 int8 kernels were asked for but this CPU lacks AVX-512 VNNI (BW, VL)");
      return *int8::int8_gemm_avx512vnni();
    case Kernels::Best:
      break;
  }
  if (has_avx512_vnni()) return *int8::int8_gemm_avx512vnni();
  return has_avx2_fma() ? *int8::int8_gemm_avx2() : int8::int8_gemm_portable();
}

// The kernels `choice` names; Best: AVX-512F, else AVX2+FMA, else the portable SSE2 ones. One this
// CPU lacks is an error rather than a crash.
const KernelSet& pick_kernels(CpuOptions::Kernels choice) {
  using Kernels = CpuOptions::Kernels;
  switch (choice) {
    case Kernels::Portable:
      return kernels_portable();
    case Kernels::Avx2:
      if (!has_avx2_fma()) throw std::runtime_error("cpu: the avx2 kernels were asked for but this CPU lacks AVX2 or FMA");
      return *kernels_avx2();
    case Kernels::Avx512:
      if (!has_avx512f()) throw std::runtime_error("cpu: the avx512 kernels were asked for but this CPU lacks AVX-512F");
      return *kernels_avx512();
    case Kernels::Best:
      break;
  }
  if (has_avx512f()) return *kernels_avx512();
  return has_avx2_fma() ? *kernels_avx2() : kernels_portable();
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const CpuOptions& options) : options_(options) {}
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    const std::string model = host_cpu_model_name();
    std::string int8_name = "none";
    try {
      int8_name = pick_int8_gemm(options_.kernels).name;
    } catch (const std::runtime_error&) {  // a forced set this CPU lacks for int8: compile() says so
    }
    return fmt::format("fp32 SIMD ({}), int8 ({}) on {} ({} threads by default)", pick_kernels(options_.kernels).name,
                       int8_name,
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
  // fp32 (tf32 runs as fp32: no TF32 on a CPU) and int8 (int8/int8_executable.hpp).
  bool supports(Precision p) const override {
    return p == Precision::FP32 || p == Precision::TF32 || p == Precision::INT8;
  }
  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options) override {
    require_precision(*this, options);
    check_supported(*this, graph);
    if (options.precision == Precision::INT8)
      return int8::make_int8_executable(graph, options, pick_int8_gemm(options_.kernels),
                                        pick_kernels(options_.kernels).preprocess);
    return std::make_unique<CpuExecutable>(graph, options, pick_kernels(options_.kernels), options_.schedule);
  }
  std::optional<std::string> cannot_train() const override { return std::nullopt; }
  // The AVX2 build whenever the processor has it (same bits as the portable one, train_f32.hpp);
  // CpuOptions::Kernels::Portable forces the portable one, as it does for inference.
  std::unique_ptr<TrainExecutable> compile_training(const Graph& graph, const TrainOptions& options) override {
    check_supported(*this, graph);
    if (!options.devices.empty())
      throw std::invalid_argument("backend 'cpu' trains on the host: --devices is for the GPU backends (custom, cudnn)");
    const bool portable = options_.kernels == CpuOptions::Kernels::Portable;
    return !portable && has_avx2_fma() ? make_trainer_f32_avx2(graph, options)
                                       : make_trainer_f32_portable(graph, options);
  }

 private:
  CpuOptions options_;
};

}  // namespace

std::optional<CpuOptions::Kernels> parse_kernels(const std::string& name) {
  if (name == "avx512") return CpuOptions::Kernels::Avx512;
  if (name == "avx2") return CpuOptions::Kernels::Avx2;
  if (name == "portable") return CpuOptions::Kernels::Portable;
  return std::nullopt;
}

CpuOptions cpu_options_from_environment() {
  CpuOptions options;
  const char* forced = std::getenv("ENGINE_CPU_KERNELS");
  if (forced == nullptr || *forced == '\0') return options;
  const auto kernels = parse_kernels(forced);
  if (!kernels)
    throw std::runtime_error(
        fmt::format("cpu: ENGINE_CPU_KERNELS must be avx512, avx2 or portable, got '{}'", forced));
  options.kernels = *kernels;
  return options;
}

std::unique_ptr<Backend> make_cpu_backend(const CpuOptions& options) { return std::make_unique<CpuBackend>(options); }

}  // namespace engine::cpu

namespace engine {

void register_cpu_backend(BackendRegistry& registry) {
  registry.add(BackendEntry{
      .name = "cpu",
      .summary = "fp32 SIMD on the host CPU (AVX-512, AVX2+FMA or portable, chosen at run time), tiles of images over "
                 "threads; int8 with VNNI/AVX2 products",
      // Above the reference (0), below the GPU backends (10, 20): the default when no GPU is usable.
      .priority = 5,
      .unavailable_reason = [] { return std::optional<std::string>(); },
      .create = [] { return cpu::make_cpu_backend(cpu::cpu_options_from_environment()); },
  });
}

}  // namespace engine

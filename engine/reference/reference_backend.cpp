// The "reference" backend: always available, priority 0, the oracle every other backend is checked
// against.
#include <fmt/format.h>
#include <omp.h>

#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/core/host_cpu.hpp"
#include "engine/core/registry.hpp"
#include "engine/reference/reference_executable.hpp"
#include "engine/reference/train_f64.hpp"

namespace engine::reference {
namespace {

class ReferenceBackend : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string description() const override {
    const std::string model = host_cpu_model_name();
    return fmt::format("reference C++ on {} ({} OpenMP threads, double accumulation)",
                       model.empty() ? std::string("the host CPU") : model, omp_get_max_threads());
  }
  std::optional<std::string> unsupported(const formats::Node& node) const override {
    switch (node.op) {
      case OpType::Conv2D: case OpType::AvgPool: case OpType::MaxPool: case OpType::Relu:
      case OpType::Tanh: case OpType::Sigmoid: case OpType::Flatten: case OpType::Dense:
      case OpType::Softmax: case OpType::Add: case OpType::ScaleShift: case OpType::Concat:
        return std::nullopt;
    }
    return "op not implemented by the reference backend";
  }
  bool supports(Precision) const override { return true; }  // fp16, bf16 and int8 emulated
  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options) override {
    require_precision(*this, options);
    check_supported(*this, graph);
    return std::make_unique<ReferenceExecutable>(graph, options);
  }
  std::optional<std::string> cannot_train() const override { return std::nullopt; }
  std::unique_ptr<TrainExecutable> compile_training(const Graph& graph, const TrainOptions& options) override {
    check_supported(*this, graph);
    if (!options.devices.empty())
      throw std::invalid_argument("backend 'reference' trains on the host: --devices is for the GPU backends (custom, cudnn)");
    return make_trainer_f64(graph, options);
  }
};

}  // namespace
}  // namespace engine::reference

namespace engine {

void register_reference_backend(BackendRegistry& registry) {
  registry.add(BackendEntry{
      .name = "reference",
      .summary = "reference C++ on the host CPU: double accumulation, OpenMP over the batch",
      .priority = 0,
      .unavailable_reason = [] { return std::optional<std::string>(); },
      .create = [] { return std::unique_ptr<Backend>(std::make_unique<reference::ReferenceBackend>()); },
  });
}

}  // namespace engine

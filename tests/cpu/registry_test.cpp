// Backend registry and check_supported, with stand-in backends registered in a local registry.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "engine/core/registry.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"

namespace {

using engine::BackendEntry;
using engine::BackendRegistry;
using formats::OpType;

// Refuses conv2d and dense, runs nothing: enough for check_supported and the registry.
class PickyBackend : public engine::Backend {
 public:
  std::string name() const override { return "picky"; }
  std::string description() const override { return "test stand-in"; }
  std::optional<std::string> unsupported(const formats::Node& node) const override {
    if (node.op == OpType::Conv2D) return "no convolutions";
    if (node.op == OpType::Dense) return "no matrix products";
    return std::nullopt;
  }
  std::unique_ptr<engine::Executable> compile(const engine::Graph& graph, const engine::CompileOptions&) override {
    engine::check_supported(*this, graph);
    throw std::logic_error("not reached in these tests");
  }
};

BackendEntry entry(const std::string& name, int priority, std::optional<std::string> why) {
  return BackendEntry{name, name + " summary", priority, [why] { return why; },
                      [] { return std::unique_ptr<engine::Backend>(std::make_unique<PickyBackend>()); }};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(Registry, CpuAndReferenceAreBuiltInAndAvailable) {
  const auto& registry = BackendRegistry::instance();
  const BackendEntry* reference = registry.find("reference");
  const BackendEntry* cpu = registry.find("cpu");
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(reference->priority, 0);
  // The fast backend is the default when no GPU backend (priority 10 and up) can run.
  EXPECT_GT(cpu->priority, reference->priority);
  EXPECT_LT(cpu->priority, 10);
  for (const char* name : {"reference", "cpu"}) {
    EXPECT_FALSE(registry.find(name)->unavailable_reason()) << name;
    EXPECT_EQ(testing_support::backend_unavailable_reason(name), "") << name;
    auto backend = registry.create(name);
    EXPECT_EQ(backend->name(), name);
    EXPECT_FALSE(backend->description().empty());
  }
  EXPECT_NE(testing_support::backend_unavailable_reason("no-such-backend").find("not built"), std::string::npos);
  // Whatever else is built here, the best available backend is one that is available.
  EXPECT_FALSE(registry.best_available().unavailable_reason());
}

TEST(Registry, BestAvailableTakesTheHighestPriorityThatIsAvailable) {
  BackendRegistry r;
  r.add(entry("low", 0, std::nullopt));
  r.add(entry("broken", 20, "no usable NVIDIA GPU: no CUDA driver found"));
  r.add(entry("mid", 10, std::nullopt));
  r.add(entry("mid2", 10, std::nullopt));
  EXPECT_EQ(r.best_available().name, "mid") << "ties keep registration order";
}

TEST(Registry, CreateSaysTheReasonOnceAndWhatToUseInstead) {
  BackendRegistry r;
  const std::string no_gpu = "no usable NVIDIA GPU: no CUDA driver found (cudaGetDeviceCount: CUDA driver version is "
                             "insufficient for CUDA runtime version)";
  r.add(entry("cpu", 0, std::nullopt));
  r.add(entry("custom", 10, no_gpu));
  r.add(entry("cudnn", 10, no_gpu));
  // Both GPU backends have the same reason: it appears once, and the message stays one clause long.
  EXPECT_EQ(message_of([&] { r.create("custom"); }),
            "backend 'custom' is not available here: " + no_gpu + "; use --backend cpu or see `engine backends`");
  EXPECT_EQ(message_of([&] { r.create("tpu"); }),
            "unknown backend 'tpu' (built in: cpu, custom, cudnn); use --backend cpu or see `engine backends`");
  EXPECT_NO_THROW(r.create("cpu"));
}

TEST(Registry, SuggestsTheBestAvailableBackendNotAFixedName) {
  BackendRegistry r;
  r.add(entry("cpu", 0, std::nullopt));
  r.add(entry("custom", 10, std::nullopt));
  r.add(entry("cudnn", 20, "cuDNN 8 is loaded but the engine was built for cuDNN 9"));
  EXPECT_EQ(message_of([&] { r.create("cudnn"); }),
            "backend 'cudnn' is not available here: cuDNN 8 is loaded but the engine was built for cuDNN 9; use "
            "--backend custom or see `engine backends`");
}

TEST(Registry, RejectsDuplicatesAndNothingAvailable) {
  BackendRegistry r;
  EXPECT_THROW(r.best_available(), std::runtime_error);
  r.add(entry("a", 0, "gone"));
  EXPECT_THROW(r.add(entry("a", 1, std::nullopt)), std::invalid_argument);
  EXPECT_THROW(r.best_available(), std::runtime_error);
}

TEST(CheckSupported, ListsEveryUnsupportedNodeInOneError) {
  auto model = testing_support::ModelBuilder("mixed", {1, 6, 6})
                   .conv2d("c1", "x", 1, 2, testing_support::window(3, 3, 1, 1), 1)
                   .unary("r", OpType::Relu, "c1")
                   .unary("f", OpType::Flatten, "r")
                   .dense("d", "f", 32, 3, 2)
                   .outputs({"d"})
                   .build();
  const engine::Graph graph = engine::plan_graph(model);
  PickyBackend picky;
  const std::string msg = message_of([&] { engine::check_supported(picky, graph); });
  EXPECT_NE(msg.find("backend 'picky'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 unsupported nodes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'c1' (conv2d): no convolutions"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'd' (dense): no matrix products"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'r'"), std::string::npos) << msg;
}

}  // namespace

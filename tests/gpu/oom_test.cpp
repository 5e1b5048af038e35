// A GPU out-of-memory at plan time is a clear error, not an abort: compile() for an absurd batch
// capacity throws an exception that names what it was allocating and says "out of memory", and the
// backend still works afterwards (a failed cudaMalloc leaves no sticky error behind).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/test_models.hpp"

namespace {

using formats::OpType;

class GpuOutOfMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuOutOfMemory, AbsurdBatchAtCompileIsAClearErrorAndTheBackendRecovers) {
  const std::string name = GetParam();
  ENGINE_SKIP_UNLESS_BACKEND(name);
  // 1M floats per sample: a batch capacity of 2^20 asks for terabytes of activations.
  auto model = testing_support::single_op_model(OpType::Relu, {4, 512, 512}, formats::Node{}, 1);
  const engine::Graph graph = engine::plan_graph(model);
  auto backend = engine::BackendRegistry::instance().create(name);

  for (int absurd : {1 << 20, 1 << 30}) {
    SCOPED_TRACE("max_batch " + std::to_string(absurd));
    engine::CompileOptions options;
    options.max_batch = absurd;
    try {
      auto exe = backend->compile(graph, options);
      ADD_FAILURE() << name << " compiled a plan for " << absurd << " samples of " << graph.arena_floats_per_sample
                    << " floats";
    } catch (const std::exception& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("allocating"), std::string::npos) << message;
      EXPECT_TRUE(message.find("out of memory") != std::string::npos ||
                  message.find("exceed") != std::string::npos)
          << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    }
  }

  // The same backend, same graph, a sane capacity: compiles and runs.
  const std::vector<float> input = testing_support::random_floats(size_t(4 * 512 * 512) * 2, 3);
  const auto outputs = testing_support::run_backend(model, name, input.data(), 2, 2);
  ASSERT_EQ(outputs.size(), 1u);
  for (size_t i = 0; i < input.size(); ++i) {
    ASSERT_EQ(outputs[0][i], input[i] > 0 ? input[i] : 0.0f) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuOutOfMemory, ::testing::Values("custom", "cudnn"),
                         [](const auto& info) { return info.param; });

}  // namespace

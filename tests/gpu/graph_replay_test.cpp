// CUDA-graph replay (Executable::use_graph_replay, which `engine run` turns on by itself and `engine
// bench --cuda-graph` measures) must give the bits plain launches give: several batches in a row,
// a change of batch size (a new capture) and back, for each GPU backend and each custom path.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace {

struct ReplayCase {
  std::string backend;
  bool fuse;
};

// Stable ctest names (gtest would otherwise list the struct's bytes, a pointer among them).
void PrintTo(const ReplayCase& c, std::ostream* os) { *os << c.backend << (c.fuse ? "" : "_per_node"); }

class GraphReplay : public ::testing::TestWithParam<ReplayCase> {};

TEST_P(GraphReplay, SameBitsAsPlainLaunchesAcrossBatchesAndSizes) {
  const ReplayCase rc = GetParam();
  ENGINE_SKIP_UNLESS_BACKEND(rc.backend);
  auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 64;
  options.fuse = rc.fuse;
  auto backend = engine::BackendRegistry::instance().create(rc.backend);
  auto plain = backend->compile(graph, options);
  auto replay = backend->compile(graph, options);
  ASSERT_FALSE(replay->use_graph_replay(true).has_value());
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const size_t classes = size_t(graph.output_elements(0));
  int round = 0;
  for (int n : {64, 64, 17, 17, 64, 1, 64}) {
    SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(n));
    const auto pixels = testing_support::random_bytes(per_sample * size_t(n), 700u + uint32_t(round++));
    std::vector<float> a(classes * size_t(n), -1.0f), b(classes * size_t(n), -2.0f);
    float* pa[] = {a.data()};
    float* pb[] = {b.data()};
    plain->run(pixels.data(), n, pa);
    replay->run(pixels.data(), n, pb);
    size_t first_diff = a.size();
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
        first_diff = i;
        break;
      }
    EXPECT_EQ(first_diff, a.size()) << "first different element " << first_diff << " (sample "
                                    << first_diff / classes << "): " << (first_diff < a.size() ? a[first_diff] : 0)
                                    << " plain vs " << (first_diff < a.size() ? b[first_diff] : 0) << " replayed";
  }
}

// concat (custom: slice-copy kernels; cudnn: cudaMemcpy2DAsync) and scale_shift (cudnnOpTensor +
// cudnnAddTensor) inside a captured graph: the same bits as plain launches.
TEST_P(GraphReplay, ConcatAndScaleShiftReplayTheSameBits) {
  const ReplayCase rc = GetParam();
  ENGINE_SKIP_UNLESS_BACKEND(rc.backend);
  auto model = testing_support::branchy_model({2, 8, 10}, 720);
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 64;
  options.fuse = rc.fuse;
  auto backend = engine::BackendRegistry::instance().create(rc.backend);
  auto plain = backend->compile(graph, options);
  auto replay = backend->compile(graph, options);
  ASSERT_FALSE(replay->use_graph_replay(true).has_value());
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const size_t classes = size_t(graph.output_elements(0));
  int round = 0;
  for (int n : {64, 64, 17, 17, 64, 1, 64}) {
    SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(n));
    const auto input = testing_support::random_floats(per_sample * size_t(n), 730u + uint32_t(round++));
    std::vector<float> a(classes * size_t(n), -1.0f), b(classes * size_t(n), -2.0f);
    float* pa[] = {a.data()};
    float* pb[] = {b.data()};
    plain->run(input.data(), n, pa);
    replay->run(input.data(), n, pb);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    for (float v : a) ASSERT_FALSE(v != v) << "NaN in the plain run's output";
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, GraphReplay,
                         ::testing::Values(ReplayCase{"custom", true}, ReplayCase{"custom", false},
                                           ReplayCase{"cudnn", true}),
                         [](const auto& info) {
                           return info.param.backend + (info.param.fuse ? "" : "_per_node");
                         });

}  // namespace

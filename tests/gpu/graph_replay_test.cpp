// CUDA-graph replay (Executable::use_graph_replay, which `engine run` turns on by itself and `engine
// bench --cuda-graph` measures) must give the bits plain launches give: several batches in a row,
// a change of batch size (a new capture) and back, for each GPU backend and each custom path.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
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

// Plain launches and graph replay of `model` on the same inputs (random raw samples from `seed`),
// batch after batch and across batch sizes: the same bits, and no NaN.
void expect_replay_matches_plain(const ReplayCase& rc, const std::shared_ptr<formats::Model>& model, uint32_t seed) {
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
  const bool u8 = model->input.dtype == formats::InputDType::UInt8;
  int round = 0;
  for (int n : {64, 64, 17, 17, 64, 1, 64}) {
    SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(n));
    const uint32_t round_seed = seed + uint32_t(round++);
    const auto bytes = u8 ? testing_support::random_bytes(per_sample * size_t(n), round_seed) : std::vector<uint8_t>{};
    const auto floats = u8 ? std::vector<float>{} : testing_support::random_floats(per_sample * size_t(n), round_seed);
    const void* input = u8 ? static_cast<const void*>(bytes.data()) : static_cast<const void*>(floats.data());
    std::vector<float> a(classes * size_t(n), -1.0f), b(classes * size_t(n), -2.0f);
    float* pa[] = {a.data()};
    float* pb[] = {b.data()};
    plain->run(input, n, pa);
    replay->run(input, n, pb);
    const size_t first_diff = testing_support::first_bit_difference(a, b);
    EXPECT_EQ(first_diff, a.size()) << "first different element " << first_diff << " (sample "
                                    << first_diff / classes << "): " << (first_diff < a.size() ? a[first_diff] : 0)
                                    << " plain vs " << (first_diff < a.size() ? b[first_diff] : 0) << " replayed";
    for (float v : a) ASSERT_FALSE(v != v) << "NaN in the plain run's output";
  }
}

class GraphReplay : public ::testing::TestWithParam<ReplayCase> {};

TEST_P(GraphReplay, SameBitsAsPlainLaunchesAcrossBatchesAndSizes) {
  ENGINE_SKIP_UNLESS_BACKEND(GetParam().backend);
  expect_replay_matches_plain(GetParam(), testing_support::lenet_like_model({}), 700u);
}

// concat (custom: slice-copy kernels; cudnn: cudaMemcpy2DAsync) and scale_shift (cudnnOpTensor +
// cudnnAddTensor) inside a captured graph: the same bits as plain launches.
TEST_P(GraphReplay, ConcatAndScaleShiftReplayTheSameBits) {
  ENGINE_SKIP_UNLESS_BACKEND(GetParam().backend);
  expect_replay_matches_plain(GetParam(), testing_support::branchy_model({2, 8, 10}, 720), 730u);
}

INSTANTIATE_TEST_SUITE_P(Gpu, GraphReplay,
                         ::testing::Values(ReplayCase{"custom", true}, ReplayCase{"custom", false},
                                           ReplayCase{"cudnn", true}),
                         [](const auto& info) {
                           return info.param.backend + (info.param.fuse ? "" : "_per_node");
                         });

}  // namespace

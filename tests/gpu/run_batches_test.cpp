// Executable::run_batches on the GPU backends: batch k + 1's upload overlaps batch k's compute (a
// copy stream, two raw-input slots), and the outputs must be the bits of run() on the same batches:
// page-locked input and input through the staging slots, plain launches and CUDA-graph replay, a
// short last batch, outputs poisoned before the call.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace {

struct StreamCase {
  std::string backend;
  bool fuse;
  bool pinned;
  bool graph;
};

// Readable, stable test names (gtest would print the struct's bytes, pointers included).
void PrintTo(const StreamCase& c, std::ostream* os) {
  *os << c.backend << (c.fuse ? "" : "_per_node") << (c.pinned ? "_pinned" : "_staged") << (c.graph ? "_graph" : "");
}

class RunBatches : public ::testing::TestWithParam<StreamCase> {};

TEST_P(RunBatches, SameBitsAsRunOnTheSameBatches) {
  const StreamCase sc = GetParam();
  ENGINE_SKIP_UNLESS_BACKEND(sc.backend);
  auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 64;
  options.fuse = sc.fuse;
  auto backend = engine::BackendRegistry::instance().create(sc.backend);
  auto reference = backend->compile(graph, options);
  auto streamed = backend->compile(graph, options);
  ASSERT_TRUE(streamed->overlaps_batches());
  if (sc.graph) ASSERT_FALSE(streamed->use_graph_replay(true).has_value());
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const int64_t classes = graph.output_elements(0);
  const int batch = 48;
  const int64_t count = 5 * batch + 13;  // five full batches and a short one
  const auto pixels = testing_support::random_bytes(per_sample * size_t(count), 901u);
  if (sc.pinned) ASSERT_TRUE(streamed->pin_host_input(pixels.data(), pixels.size()));

  std::vector<float> expected(size_t(classes * count));
  for (int64_t start = 0; start < count; start += batch) {
    const int n = int(std::min<int64_t>(batch, count - start));
    float* out[] = {expected.data() + start * classes};
    reference->run(pixels.data() + size_t(start) * per_sample, n, out);
  }
  for (int round = 0; round < 2; ++round) {  // the second call reuses the slots and events
    SCOPED_TRACE("call " + std::to_string(round));
    std::vector<float> got(expected.size(), std::numeric_limits<float>::quiet_NaN());
    float* outs[] = {got.data()};
    const int64_t elements[] = {classes};
    streamed->run_batches(engine::BatchStream{pixels.data(), per_sample, count, batch, outs, elements});
    const size_t first_diff = testing_support::first_bit_difference(got, expected);
    ASSERT_EQ(first_diff, got.size()) << "first different element " << first_diff << " (sample "
                                      << first_diff / size_t(classes) << ")";
    const auto t = streamed->last_timings();
    ASSERT_TRUE(t.has_value());
    EXPECT_GT(t->compute_ms, 0.0);
  }
  // A batch past max_batch is refused before anything runs.
  std::vector<float> got(expected.size());
  float* outs[] = {got.data()};
  const int64_t elements[] = {classes};
  EXPECT_THROW(streamed->run_batches(engine::BatchStream{pixels.data(), per_sample, count, 65, outs, elements}),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Gpu, RunBatches,
                         ::testing::Values(StreamCase{"custom", true, true, true}, StreamCase{"custom", true, false, false},
                                           StreamCase{"custom", false, true, false},
                                           StreamCase{"cudnn", true, true, true}, StreamCase{"cudnn", true, false, false}),
                         [](const ::testing::TestParamInfo<StreamCase>& info) {
                           std::string name = info.param.backend + (info.param.fuse ? "" : "_per_node") +
                                              (info.param.pinned ? "_pinned" : "_staged") +
                                              (info.param.graph ? "_graph" : "");
                           return name;
                         });

}  // namespace

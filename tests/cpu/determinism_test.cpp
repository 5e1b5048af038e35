// The CPU reference must be bitwise reproducible: across runs, thread counts, batch capacities and
// the position of a sample in its batch. GPU parity tests depend on a reference that never moves.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"

namespace {

using formats::OpType;
using testing_support::window;

// Sigmoid after the second convolution, an asymmetrically padded 3x3 max pool, two outputs.
std::shared_ptr<formats::Model> lenet_like_model() {
  testing_support::LenetLike o;
  o.seed = 11;
  o.s4_window = window(3, 3, 2, 2, 1, 0, 1, 0);
  o.logits_output = true;
  return testing_support::lenet_like_model(o);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CpuDeterminism, RepeatedRunsAreBitwiseEqual) {
  auto model = lenet_like_model();
  const int batch = 37;
  const auto pixels = testing_support::random_bytes(size_t(784) * batch, 7);
  const auto first = testing_support::run_backend(model, "reference", pixels.data(), batch, batch);
  const auto second = testing_support::run_backend(model, "reference", pixels.data(), batch, batch);
  ASSERT_EQ(first.size(), 2u);
  for (size_t o = 0; o < first.size(); ++o) EXPECT_TRUE(bitwise_equal(first[o], second[o])) << "output " << o;
  // The softmax output is a probability vector.
  for (int s = 0; s < batch; ++s) {
    double sum = 0;
    for (int k = 0; k < 10; ++k) sum += first[0][s * 10 + k];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(CpuDeterminism, SameExecutableRunTwice) {
  auto model = lenet_like_model();
  const engine::Graph graph = engine::plan_graph(model);
  auto exe = engine::BackendRegistry::instance().create("reference")->compile(graph, {.max_batch = 16});
  const auto pixels = testing_support::random_bytes(size_t(784) * 16, 9);
  std::vector<float> a(160), b(160), logits(160);
  float* outs_a[] = {a.data(), logits.data()};
  float* outs_b[] = {b.data(), logits.data()};
  exe->run(pixels.data(), 16, outs_a);
  // A smaller batch in between must not leave anything behind that changes the next result.
  exe->run(pixels.data() + 784 * 3, 5, outs_b);
  exe->run(pixels.data(), 16, outs_b);
  EXPECT_TRUE(bitwise_equal(a, b));
}

TEST(CpuDeterminism, IndependentOfThreadsCapacityAndPosition) {
  auto model = lenet_like_model();
  const int batch = 37;
  const auto pixels = testing_support::random_bytes(size_t(784) * batch, 8);
  const auto reference = testing_support::run_backend(model, "reference", pixels.data(), batch, batch);

  const int threads = omp_get_max_threads();
  for (int t : {1, 3}) {
    omp_set_num_threads(t);
    const auto again = testing_support::run_backend(model, "reference", pixels.data(), batch, 64);
    for (size_t o = 0; o < again.size(); ++o)
      EXPECT_TRUE(bitwise_equal(reference[o], again[o])) << t << " threads, output " << o;
  }
  omp_set_num_threads(threads);

  for (int s : {0, 17, 36}) {
    const auto alone = testing_support::run_backend(model, "reference", pixels.data() + size_t(784) * s, 1, 1);
    const std::vector<float> expected(reference[0].begin() + s * 10, reference[0].begin() + (s + 1) * 10);
    EXPECT_TRUE(bitwise_equal(alone[0], expected)) << "sample " << s << " alone differs from its place in a batch";
  }
}

}  // namespace

namespace {

// Executable::run_batches' default (a loop over run()) on the host backends: the bits of run() on
// the same batches, a short last batch, no images at all, and a batch past max_batch refused.
TEST(CpuRunBatches, SameBitsAsRunOnTheSameBatches) {
  auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const int64_t classes = graph.output_elements(0);
  for (const char* name : {"cpu", "reference"}) {
    SCOPED_TRACE(name);
    engine::CompileOptions options;
    options.max_batch = 16;
    auto exe = engine::BackendRegistry::instance().create(name)->compile(graph, options);
    EXPECT_FALSE(exe->overlaps_batches());
    const int batch = 16;
    const int64_t count = 3 * batch + 5;
    const auto pixels = testing_support::random_bytes(per_sample * size_t(count), 77u);
    std::vector<float> expected(size_t(classes * count)), got(expected.size(), -7.0f);
    for (int64_t start = 0; start < count; start += batch) {
      const int n = int(std::min<int64_t>(batch, count - start));
      float* out[] = {expected.data() + start * classes};
      exe->run(pixels.data() + size_t(start) * per_sample, n, out);
    }
    float* outs[] = {got.data()};
    const int64_t elements[] = {classes};
    exe->run_batches(engine::BatchStream{pixels.data(), per_sample, count, batch, outs, elements});
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
    exe->run_batches(engine::BatchStream{pixels.data(), per_sample, 0, batch, outs, elements});  // nothing to do
    EXPECT_THROW(exe->run_batches(engine::BatchStream{pixels.data(), per_sample, count, 17, outs, elements}),
                 std::invalid_argument);
    EXPECT_THROW(exe->run_batches(engine::BatchStream{pixels.data(), per_sample, count, 0, outs, elements}),
                 std::invalid_argument);
  }
}

}  // namespace

// The custom backend's per-node path (CompileOptions::fuse off) and its fusion of an activation
// into the preceding conv2d/dense epilogue: the fused pairs against the CPU, the rules (what is fused, what is not, from plan_summary), and fused vs
// unfused results being bitwise identical.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/custom_test_util.hpp"

namespace {

using custom_test::expect_matches_cpu_all_batches;
using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;

std::string plan_of(const std::shared_ptr<formats::Model>& model, engine::Precision precision = engine::Precision::FP32) {
  engine::CompileOptions options = custom_test::per_node_options();
  options.max_batch = 8;
  options.precision = precision;
  auto backend = engine::BackendRegistry::instance().create("custom");
  return backend->compile(engine::plan_graph(model), options)->plan_summary();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::shared_ptr<formats::Model> dense_tanh(bool dense_is_output) {
  return ModelBuilder(dense_is_output ? "dense_tanh_unfused" : "dense_tanh", {400})
      .dense("d", "x", 400, 120, 21)
      .unary("t", OpType::Tanh, "d")
      .outputs(dense_is_output ? std::vector<std::string>{"t", "d"} : std::vector<std::string>{"t"})
      .build();
}

std::shared_ptr<formats::Model> conv_relu(bool conv_is_output) {
  return ModelBuilder(conv_is_output ? "conv_relu_unfused" : "conv_relu", {3, 17, 23})
      .conv2d("c", "x", 3, 7, window(3, 3, 2, 2, 1, 2, 0, 1), 31)
      .unary("r", OpType::Relu, "c")
      .outputs(conv_is_output ? std::vector<std::string>{"r", "c"} : std::vector<std::string>{"r"})
      .build();
}

// A LeNet-shaped chain with every fusable pair and every other op.
std::shared_ptr<formats::Model> lenet_like_chain() {
  return ModelBuilder("lenet_like_chain", {1, 32, 32})
      .conv2d("c1", "x", 1, 6, window(5, 5, 1, 1), 41)
      .unary("s1", OpType::Sigmoid, "c1")
      .pool("p1", OpType::MaxPool, "s1", window(2, 2, 2, 2))
      .conv2d("c2", "p1", 6, 16, window(5, 5, 1, 1), 43)
      .unary("r2", OpType::Relu, "c2")
      .pool("p2", OpType::AvgPool, "r2", window(2, 2, 2, 2), false)
      .unary("f", OpType::Flatten, "p2")
      .dense("d1", "f", 400, 120, 45)
      .unary("t1", OpType::Tanh, "d1")
      .dense("d2", "t1", 120, 10, 47)
      .unary("prob", OpType::Softmax, "d2")
      .outputs({"prob"})
      .build();
}

TEST(CustomFusion, DenseTanhFusedMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = dense_tanh(false);
  EXPECT_TRUE(contains(plan_of(model), "node 'd' (dense + tanh 't')")) << plan_of(model);
  expect_matches_cpu_all_batches(model, 1001, -3.0f, 3.0f);
}

TEST(CustomFusion, ConvReluFusedMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = conv_relu(false);
  EXPECT_TRUE(contains(plan_of(model), "node 'c' (conv2d + relu 'r')")) << plan_of(model);
  expect_matches_cpu_all_batches(model, 1002);
}

TEST(CustomFusion, LenetLikeChainFusesEveryPairAndMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = lenet_like_chain();
  const std::string plan = plan_of(model);
  EXPECT_TRUE(contains(plan, "(conv2d + sigmoid 's1')")) << plan;
  EXPECT_TRUE(contains(plan, "(conv2d + relu 'r2')")) << plan;
  EXPECT_TRUE(contains(plan, "(dense + tanh 't1')")) << plan;
  EXPECT_TRUE(contains(plan, "node 'f' (flatten): view")) << plan;
  expect_matches_cpu_all_batches(model, 1003);
}

// The producer is a graph output (or has two readers): each node runs alone.
TEST(CustomFusion, UnfusablePairsRunUnfusedAndMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto outputs_both = dense_tanh(true);
  std::string plan = plan_of(outputs_both);
  EXPECT_FALSE(contains(plan, "+ tanh")) << plan;
  EXPECT_TRUE(contains(plan, "node 't' (tanh)")) << plan;
  expect_matches_cpu_all_batches(outputs_both, 1004, -3.0f, 3.0f);

  auto conv_both = conv_relu(true);
  plan = plan_of(conv_both);
  EXPECT_FALSE(contains(plan, "+ relu")) << plan;
  expect_matches_cpu_all_batches(conv_both, 1005);

  auto two_readers = ModelBuilder("two_readers", {64})
                         .dense("d", "x", 64, 33, 51)
                         .unary("t", OpType::Tanh, "d")
                         .unary("r", OpType::Relu, "d")
                         .add("y", "t", "r")
                         .outputs({"y"})
                         .build();
  plan = plan_of(two_readers);
  EXPECT_FALSE(contains(plan, "(dense +")) << plan;
  expect_matches_cpu_all_batches(two_readers, 1006);
}

// Fusion must not change a single bit: dense+tanh fused (t alone is the output) and unfused (d is
// an output too) share weights (same seeds), so their 't' outputs are bitwise equal.
TEST(CustomFusion, FusedAndUnfusedAreBitwiseEqual) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const int batch = 37;
  {
    const auto input = testing_support::random_floats(size_t(400) * batch, 1010, -3.0f, 3.0f);
    const auto fused = testing_support::run_backend(dense_tanh(false), "custom", input.data(), batch, 64,
                                                           custom_test::per_node_options());
    const auto unfused = testing_support::run_backend(dense_tanh(true), "custom", input.data(), batch, 64,
                                                             custom_test::per_node_options());
    ASSERT_EQ(fused[0].size(), unfused[0].size());
    EXPECT_EQ(std::memcmp(fused[0].data(), unfused[0].data(), fused[0].size() * sizeof(float)), 0);
  }
  {
    const auto input = testing_support::random_floats(size_t(3 * 17 * 23) * batch, 1011);
    const auto fused = testing_support::run_backend(conv_relu(false), "custom", input.data(), batch, 64,
                                                           custom_test::per_node_options());
    const auto unfused = testing_support::run_backend(conv_relu(true), "custom", input.data(), batch, 64,
                                                             custom_test::per_node_options());
    ASSERT_EQ(fused[0].size(), unfused[0].size());
    EXPECT_EQ(std::memcmp(fused[0].data(), unfused[0].data(), fused[0].size() * sizeof(float)), 0);
  }
}

TEST(CustomBackend, RegistryEntryAndTf32Option) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const engine::BackendEntry* entry = engine::BackendRegistry::instance().find("custom");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->priority, 20);
  auto backend = entry->create();
  EXPECT_EQ(backend->name(), "custom");
  EXPECT_TRUE(contains(backend->description(), "sm_")) << backend->description();
  // TF32 asked: runs fp32 (same parity) and says so.
  auto model = dense_tanh(false);
  EXPECT_TRUE(contains(plan_of(model, engine::Precision::TF32), "TF32")) << plan_of(model, engine::Precision::TF32);
  engine::CompileOptions tf32 = custom_test::per_node_options();
  tf32.precision = engine::Precision::TF32;
  const auto input = testing_support::random_floats(size_t(400) * 5, 1020);
  const auto c = testing_support::compare_with_cpu(model, "custom", input.data(), 5, 5, tf32);
  EXPECT_EQ(c.unwritten, 0u);
  EXPECT_LE(c.max_rel_error, 1e-5) << c.worst;
}

}  // namespace

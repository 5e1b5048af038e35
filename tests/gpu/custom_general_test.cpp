// The custom backend's general fp32 path (engine/custom/general/): its implicit-GEMM conv2d and
// dense kernels with fused epilogues against the CPU on fresh random inputs (outputs NaN-poisoned
// before the run), whole models with branches, concat and residual adds, the path each graph takes,
// and the same bits for the same images whatever batch they run in.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/custom_backend.hpp"
#include "engine/custom/general/conv_gemm.hpp"
#include "engine/custom/general/general_plan.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/custom_general_util.hpp"
#include "tests/gpu/gpu_op_test_util.hpp"

namespace {

using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;

// fp32 sums of up to a few thousand products against the double reference (the fused path's bound).
constexpr double kGeneralTolerance = 2e-4;

using custom_general_test::general_backend;

std::string summary_of(const std::shared_ptr<formats::Model>& model, engine::Backend& backend, bool fuse = true) {
  engine::CompileOptions options;
  options.max_batch = 4;
  options.fuse = fuse;
  return backend.compile(engine::plan_graph(model), options)->plan_summary();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_general_matches_cpu(const std::shared_ptr<formats::Model>& model, uint32_t seed) {
  auto backend = general_backend();
  const std::string summary = summary_of(model, *backend);
  EXPECT_TRUE(contains(summary, "path: general fp32")) << summary;
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  for (const auto& bc : gpu_test::batch_cases()) {
    const auto input = testing_support::random_floats(per_sample * size_t(bc.batch), seed + uint32_t(bc.batch));
    const auto c = testing_support::compare_with_cpu(model, *backend, input.data(), bc.batch, bc.max_batch);
    const std::string where = model->name + ", batch " + std::to_string(bc.batch) + " of " + std::to_string(bc.max_batch);
    EXPECT_EQ(c.unwritten, 0u) << where;
    EXPECT_LE(c.max_rel_error, kGeneralTolerance) << where << ", worst " << c.worst;
    EXPECT_GT(c.elements, 0u) << where;
  }
}

struct ConvCase {
  int c_in, c_out, size, kernel, stride;
  bool same;
};

// One conv (with an activation, and a 2x2 max pool where asked) on the general path.
std::shared_ptr<formats::Model> conv_model(const ConvCase& k, bool pool, uint32_t seed) {
  const int pad = k.same ? k.kernel / 2 : 0;
  const std::string name = "conv_" + std::to_string(k.c_in) + "x" + std::to_string(k.size) + "_" +
                           std::to_string(k.c_out) + "_k" + std::to_string(k.kernel) + "s" + std::to_string(k.stride) +
                           (k.same ? "_same" : "_valid") + (pool ? "_pool" : "");
  ModelBuilder b(name, {k.c_in, k.size, k.size});
  b.conv2d("c", "x", k.c_in, k.c_out, window(k.kernel, k.kernel, k.stride, k.stride, pad, pad, pad, pad), seed)
      .unary("r", OpType::Relu, "c");
  if (pool) b.pool("p", OpType::MaxPool, "r", window(2, 2, 2, 2));
  return b.outputs({pool ? "p" : "r"}).build();
}

TEST(CustomGeneral, ConvMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const std::vector<ConvCase> cases = {
      {1, 7, 5, 3, 1, true},    {3, 33, 9, 3, 1, true},   {5, 64, 13, 5, 1, false}, {1, 33, 28, 3, 2, true},
      {3, 7, 32, 5, 2, false},  {5, 64, 17, 3, 1, false}, {3, 64, 28, 3, 1, true},  {1, 7, 32, 5, 1, true},
      {5, 33, 6, 5, 1, true},   {64, 130, 7, 3, 1, true},
  };
  uint32_t seed = 100;
  for (const ConvCase& k : cases)
    for (bool pool : {false, true}) {
      auto model = conv_model(k, pool, seed += 10);
      SCOPED_TRACE(model->name);
      expect_general_matches_cpu(model, seed);
    }
}

TEST(CustomGeneral, DenseMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (const auto& [in, units] : std::vector<std::pair<int, int>>{{7, 3}, {400, 120}, {33, 129}, {1000, 10}}) {
    auto model = ModelBuilder("dense_" + std::to_string(in) + "_" + std::to_string(units), {in})
                     .dense("d", "x", in, units, 300u + uint32_t(in))
                     .unary("t", OpType::Tanh, "d")
                     .scale_shift("bn", "t", units, 310u + uint32_t(units))
                     .unary("prob", OpType::Softmax, "bn")
                     .outputs({"prob"})
                     .build();
    SCOPED_TRACE(model->name);
    expect_general_matches_cpu(model, 320u + uint32_t(units));
  }
}

// Each block tile (large tiles read the k table as they issue, 4x4 thread tiles one step ahead;
// the dense rows through per-thread row pointers) against the CPU: padding, stride 2, K not a
// multiple of 8, rows past M and channels past the tile, at a batch that leaves a partial tile.
TEST(CustomGeneral, EveryTileMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  std::vector<std::shared_ptr<formats::Model>> models = {conv_model({3, 33, 11, 3, 1, true}, false, 400),
                                                         conv_model({5, 70, 13, 3, 2, true}, true, 410),
                                                         conv_model({17, 129, 9, 5, 1, false}, false, 420)};
  models.push_back(ModelBuilder("dense_tiles", {301})
                       .dense("d", "x", 301, 131, 430u)
                       .unary("r", OpType::Relu, "d")
                       .outputs({"r"})
                       .build());
  for (const auto& model : models) {
    const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
    const auto input = testing_support::random_floats(per_sample * 45, 440);
    for (int t = 0; t < int(engine::custom::general::GemmTile::Count); ++t) {
      auto backend = general_backend(t);
      const auto c = testing_support::compare_with_cpu(model, *backend, input.data(), 45, 45);
      const std::string where =
          model->name + ", tile " + engine::custom::general::gemm_tile_name(engine::custom::general::GemmTile(t));
      EXPECT_EQ(c.unwritten, 0u) << where;
      EXPECT_LE(c.max_rel_error, kGeneralTolerance) << where << ", worst " << c.worst;
      EXPECT_GT(c.elements, 0u) << where;
    }
  }
}

// Two branches joined by a concat (written in place), a residual add, scale_shift (BatchNorm
// folded), a pool the epilogue cannot run (3x3), an MLP head, two outputs.
std::shared_ptr<formats::Model> branch_add_model(uint32_t seed) {
  return ModelBuilder("branch_add", {3, 15, 15})
      .conv2d("stem", "x", 3, 12, window(3, 3, 1, 1, 1, 1, 1, 1), seed)
      .unary("stem_r", OpType::Relu, "stem")
      .conv2d("a", "stem_r", 12, 7, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 2)
      .scale_shift("a_bn", "a", 7, seed + 4)
      .unary("a_r", OpType::Relu, "a_bn")
      .conv2d("b", "stem_r", 12, 5, window(1, 1, 1, 1), seed + 6)
      .unary("b_t", OpType::Tanh, "b")
      .concat("ab", {"a_r", "b_t"})
      .conv2d("c", "ab", 12, 12, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 8)
      .add("res", "c", "stem_r")
      .unary("res_r", OpType::Relu, "res")
      .pool("p", OpType::MaxPool, "res_r", window(3, 3, 2, 2))
      .conv2d("d", "p", 12, 16, window(3, 3, 1, 1, 1, 1, 1, 1), seed + 10)
      .unary("d_r", OpType::Relu, "d")
      .pool("q", OpType::MaxPool, "d_r", window(2, 2, 2, 2))
      .unary("f", OpType::Flatten, "q")
      .dense("h", "f", 16 * 3 * 3, 33, seed + 12)
      .unary("h_r", OpType::Sigmoid, "h")
      .dense("o", "h_r", 33, 10, seed + 14)
      .unary("prob", OpType::Softmax, "o")
      .outputs({"prob", "h_r"})
      .build();
}

TEST(CustomGeneral, BranchesConcatAddMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = branch_add_model(500);
  // Not a chain: the default backend takes the general path without being asked.
  auto registry_backend = engine::custom::make_custom_backend();
  const std::string summary = summary_of(model, *registry_backend);
  EXPECT_TRUE(contains(summary, "path: general fp32")) << summary;
  EXPECT_TRUE(contains(summary, "fused chain not taken")) << summary;
  EXPECT_TRUE(contains(summary, "concat slice at")) << summary;        // a, b written in place
  EXPECT_TRUE(contains(summary, "add 'stem_r'")) << summary;           // the residual in c's epilogue
  EXPECT_TRUE(contains(summary, "maxpool 2x2")) << summary;            // q in d's epilogue
  EXPECT_TRUE(contains(summary, "maxpool_forward")) << summary;        // p (3x3) on its own
  expect_general_matches_cpu(model, 510);
  expect_general_matches_cpu(testing_support::branchy_model({3, 10, 14}, 520), 530);
}

TEST(CustomGeneral, NoFuseIsThePerNodeOracle) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto backend = engine::custom::make_custom_backend();
  const std::string summary = summary_of(branch_add_model(600), *backend, false);
  EXPECT_TRUE(contains(summary, "per-node kernels")) << summary;
  EXPECT_FALSE(contains(summary, "general fp32")) << summary;
}

// A chain the fused path could run, with conv layers past the rule's multiply-adds (keras-cnn's
// shape): the general path by default, the fused chain when forced.
TEST(CustomGeneral, HeavyConvChainsTakeTheGeneralPathByDefault) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = ModelBuilder("heavy_chain", {1, 28, 28})
                   .conv2d("c1", "x", 1, 32, window(3, 3, 1, 1), 1100)
                   .unary("r1", OpType::Relu, "c1")
                   .conv2d("c2", "r1", 32, 64, window(3, 3, 1, 1), 1102)
                   .unary("r2", OpType::Relu, "c2")
                   .pool("p", OpType::MaxPool, "r2", window(2, 2, 2, 2))
                   .unary("f", OpType::Flatten, "p")
                   .dense("d", "f", 64 * 12 * 12, 10, 1104)
                   .unary("prob", OpType::Softmax, "d")
                   .outputs({"prob"})
                   .build();
  const std::string by_rule = summary_of(model, *engine::custom::make_custom_backend());
  EXPECT_TRUE(contains(by_rule, "path: general fp32")) << by_rule;
  EXPECT_TRUE(contains(by_rule, "multiply-adds per sample")) << by_rule;
  engine::custom::CustomOptions fused;
  fused.general.over_fused_chain = false;
  const std::string forced = summary_of(model, *engine::custom::make_custom_backend(fused));
  EXPECT_FALSE(contains(forced, "general fp32")) << forced;
}

// Batches past 65,535 samples (the end of 16-bit grid dimensions): every op kind on the general path.
TEST(CustomGeneral, HugeBatchesMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto backend = general_backend();
  uint32_t seed = 800;
  for (const auto& m : gpu_test::huge_batch_models()) {
    SCOPED_TRACE(m.model->name);
    for (const auto& bc : gpu_test::huge_batch_cases())
      gpu_test::expect_matches_cpu(*backend, m.model, bc, seed++, m.lo, m.hi, {}, kGeneralTolerance);
  }
}

// The same images give the same bits in batches of 1, 7 and 64 (each compiled for its own
// capacity, so the tiles differ) and in one batch of 300.
TEST(CustomGeneral, BitwiseEqualAcrossBatchSplits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  custom_general_test::expect_same_bits_across_splits(branch_add_model(700), 300, 20, 710);
}

// Every block tile gives the planner's bits: the K chunks are fixed per layer, and the zero
// padding changes no bit.
TEST(CustomGeneral, EveryTileGivesTheSameBits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  custom_general_test::expect_every_tile_gives_the_planned_bits(branch_add_model(900), 37, 910, {std::nullopt});
}

// The plan alone (host code, runs without a GPU): what each GEMM fuses, the concat inputs written
// in place, and blocks that share space never live at the same step.
TEST(CustomGeneralPlan, FusesEpiloguesWritesSlicesInPlaceAndNeverOverlapsLiveBlocks) {
  using namespace engine::custom::general;
  const GeneralPlan plan = plan_general(engine::plan_graph(branch_add_model(1000)));
  const engine::Graph& g = plan.graph;
  // stem+relu, a+scale_shift+relu, b+tanh, concat, c+add+relu, pool 3x3, d+relu+maxpool 2x2, h+sigmoid, o, softmax.
  EXPECT_EQ(plan.steps.size(), 10u);
  EXPECT_EQ(plan.fused_nodes, 9);
  EXPECT_EQ(plan.in_place_slices, 2);
  auto value = [&](const std::string& name) {
    for (size_t i = 0; i < g.values.size(); ++i)
      if (g.values[i].name == name) return int(i);
    ADD_FAILURE() << "no value " << name;
    return 0;
  };
  const View ab = plan.views[size_t(value("ab"))], a = plan.views[size_t(value("a_r"))],
             b = plan.views[size_t(value("b_t"))];
  EXPECT_EQ(a.block, ab.block);
  EXPECT_EQ(b.block, ab.block);
  EXPECT_EQ(a.offset, ab.offset);
  EXPECT_EQ(b.offset, ab.offset + 7 * 15 * 15);
  for (const char* inner : {"stem", "a", "a_bn", "b", "c", "res", "d", "d_r", "h"})
    EXPECT_LT(plan.views[size_t(value(inner))].block, 0) << inner << " is never materialised";
  for (const std::string out : {"prob", "h_r"})
    EXPECT_GE(plan.blocks.at(size_t(plan.views[size_t(value(out))].block)).arena_value, 0) << out;
  for (size_t i = 0; i < plan.blocks.size(); ++i)
    for (size_t j = i + 1; j < plan.blocks.size(); ++j) {
      const Block &x = plan.blocks[i], &y = plan.blocks[j];
      if (x.arena_value >= 0 || y.arena_value >= 0) continue;
      const bool meet = x.first <= y.last && y.first <= x.last;
      const bool share = x.offset < y.offset + y.floats && y.offset < x.offset + x.floats;
      EXPECT_FALSE(meet && share) << "blocks " << i << " and " << j;
      EXPECT_LE(x.offset + x.floats, plan.buffer_floats);
    }
}

// The conv k table (host code): one entry per k of K padded to whole steps; the entries past K
// hold a window row no input has, so the loader needs no test of k.
TEST(CustomGeneralPlan, KTableCoversThePaddedKAndOffsetsEachInput) {
  using namespace engine::custom::general;
  const GeneralPlan plan = plan_general(engine::plan_graph(conv_model({3, 5, 11, 3, 2, true}, false, 1100)));
  ASSERT_FALSE(plan.steps.empty());
  const auto& step = std::get<GemmStep>(plan.steps.front().op);
  const int K = 3 * 3 * 3, kp = 32;
  ASSERT_EQ(step.k_table.size(), size_t(kp) * 4);
  for (int k = 0; k < kp; ++k) {
    const int* e = &step.k_table[size_t(k) * 4];
    if (k < K) {
      const int c = k / 9, p = k / 3 % 3, q = k % 3;
      EXPECT_EQ(e[0], c * 11 * 11) << k;
      EXPECT_EQ(e[1], p) << k;
      EXPECT_EQ(e[2], q) << k;
      EXPECT_EQ(e[3], (c * 11 + p) * 11 + q) << k;
    } else {
      EXPECT_EQ(e[1], kKTableNoRow) << k;
    }
  }
}

}  // namespace

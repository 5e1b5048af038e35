// The general path's K chunks (conv_gemm.hpp: a layer's K cut into chunks chosen from its shape,
// summed in order): layers with long K against the CPU on fresh random inputs (outputs poisoned),
// the same bits whether a batch runs the chunks on separate blocks (small batches) or in one thread
// (large ones), for every tile, and the chunk plan's own rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/custom_backend.hpp"
#include "engine/custom/general/conv_gemm.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/custom_general_util.hpp"
#include "tests/gpu/gpu_op_test_util.hpp"

namespace {

using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;
namespace general = engine::custom::general;

constexpr double kChunkTolerance = 2e-4;  // fp32 sums of a few thousand products (custom_general_test.cpp)

using custom_general_test::general_backend;

// Deep, narrow layers (long K over few pixels): a 3x3 conv of 64 -> 128 channels at 7x7, a 5x5 conv
// of 128 -> 33 with a fused 2x2 max pool (odd sizes), dense layers of 1,089 -> 200 and 200 -> 10.
std::shared_ptr<formats::Model> deep_model(uint32_t seed) {
  return ModelBuilder("deep_narrow", {64, 7, 7})
      .conv2d("a", "x", 64, 128, window(3, 3, 1, 1, 1, 1, 1, 1), seed)
      .unary("a_r", OpType::Relu, "a")
      .conv2d("b", "a_r", 128, 33, window(5, 5, 1, 1, 2, 2, 2, 2), seed + 2)
      .unary("b_t", OpType::Tanh, "b")
      .pool("p", OpType::MaxPool, "b_t", window(2, 2, 2, 2))
      .unary("f", OpType::Flatten, "p")
      .dense("h", "f", 33 * 3 * 3, 200, seed + 4)
      .unary("h_r", OpType::Relu, "h")
      .dense("o", "h_r", 200, 10, seed + 6)
      .unary("prob", OpType::Softmax, "o")
      .outputs({"prob", "h_r"})
      .build();
}

std::string summary_of(const std::shared_ptr<formats::Model>& model, int max_batch) {
  engine::CompileOptions options;
  options.max_batch = max_batch;
  return general_backend()->compile(engine::plan_graph(model), options)->plan_summary();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The general path against the CPU on fresh random inputs at every batch case (outputs poisoned).
void expect_matches_cpu(const std::shared_ptr<formats::Model>& model, uint32_t seed) {
  auto backend = general_backend();
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  for (const auto& bc : gpu_test::batch_cases()) {
    const auto input = testing_support::random_floats(per_sample * size_t(bc.batch), seed + uint32_t(bc.batch));
    const auto c = testing_support::compare_with_cpu(model, *backend, input.data(), bc.batch, bc.max_batch);
    const std::string where = "batch " + std::to_string(bc.batch) + " of " + std::to_string(bc.max_batch);
    EXPECT_EQ(c.unwritten, 0u) << where;
    EXPECT_LE(c.max_rel_error, kChunkTolerance) << where << ", worst " << c.worst;
    EXPECT_GT(c.elements, 0u) << where;
  }
}

TEST(CustomGeneralChunks, LongKLayersMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = deep_model(1200);
  const std::string summary = summary_of(model, 1000);
  EXPECT_TRUE(contains(summary, "K chunks of")) << summary;
  EXPECT_TRUE(contains(summary, "chunks on blocks at batch 1")) << summary;
  EXPECT_TRUE(contains(summary, "chunks in thread at batch 1000")) << summary;
  expect_matches_cpu(model, 1210u);
}

// Batches of 1 and 7 run the chunks on separate blocks, 64 and 300 in one thread: the same bits.
TEST(CustomGeneralChunks, BitwiseEqualAcrossBatchSplits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  custom_general_test::expect_same_bits_across_splits(deep_model(1300), 300, 12, 1310);
}

// Every tile, with the chunks forced on blocks and forced in one thread, at a small and a larger
// batch: the planner's bits.
TEST(CustomGeneralChunks, EveryTileAndChunkSpreadGivesTheSameBits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (int batch : {3, 200})
    custom_general_test::expect_every_tile_gives_the_planned_bits(deep_model(1400), batch, 1410u + uint32_t(batch),
                                                                  {true, false});
}

// One executable run again and again (plain launches, then CUDA-graph replays) at batches whose
// chunks run on separate blocks: each tile's last block resets its arrival counter, so every run
// gives the first run's bits, also between batches of different sizes.
TEST(CustomGeneralChunks, RepeatedRunsGiveTheSameBits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = deep_model(1700);
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 7;
  auto exe = general_backend()->compile(graph, options);
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const auto input = testing_support::random_floats(per_sample * 7, 1710u);
  auto run = [&](int n) {
    std::vector<std::vector<float>> out;
    std::vector<float*> pointers;
    for (size_t i = 0; i < graph.outputs.size(); ++i) out.emplace_back(size_t(graph.output_elements(i)) * size_t(n), -1.0f);
    for (auto& o : out) pointers.push_back(o.data());
    exe->run(input.data(), n, pointers);
    return out;
  };
  const auto first7 = run(7), first2 = run(2);
  for (bool replay : {false, true}) {
    exe->use_graph_replay(replay);
    for (int i = 0; i < 3; ++i)
      for (int n : {7, 2}) {
        const auto again = run(n);
        const auto& first = n == 7 ? first7 : first2;
        for (size_t o = 0; o < first.size(); ++o)
          EXPECT_EQ(testing_support::first_bit_difference(again[o], first[o]), first[o].size())
              << "run " << i << " at batch " << n << (replay ? " (graph replay)" : "") << ", output " << o;
      }
  }
}

// An MLP of odd widths (rows of A not 16-byte aligned, K not a multiple of the 8-value step): against
// the CPU, and the planner's bits on every tile and chunk spreading.
// Three dense layers of in -> h1 -> h2 -> out units (ReLU, tanh, softmax).
std::shared_ptr<formats::Model> mlp_model(const std::string& name, int in, int h1, int h2, int out, uint32_t seed) {
  return ModelBuilder(name, {in})
      .dense("a", "x", in, h1, seed)
      .unary("a_r", OpType::Relu, "a")
      .dense("b", "a_r", h1, h2, seed + 2)
      .unary("b_t", OpType::Tanh, "b")
      .dense("o", "b_t", h2, out, seed + 4)
      .unary("prob", OpType::Softmax, "o")
      .outputs({"prob"})
      .build();
}
std::shared_ptr<formats::Model> odd_mlp(uint32_t seed) { return mlp_model("odd_mlp", 787, 509, 131, 13, seed); }

TEST(CustomGeneralChunks, OddMlpMatchesCpuOnEveryTile) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = odd_mlp(1500);
  expect_matches_cpu(model, 1510u);
  for (int batch : {1, 130})
    custom_general_test::expect_every_tile_gives_the_planned_bits(model, batch, 1520u + uint32_t(batch), {true, false});
}

// The dense loader's 16-byte row copies (GeneralOptions::dense_row_copies) on an MLP whose every K
// is a multiple of 4 (784; 300 and 132 end in half a step of 8): against the CPU, and the 4-byte
// loader's bits on every tile and chunk spreading, at a batch of 1 and one that leaves partial tiles.
TEST(CustomGeneralChunks, DenseRowCopiesGiveTheSameBits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = mlp_model("aligned_mlp", 784, 300, 132, 13, 1700);
  auto backend = [](bool rows16, std::optional<int> tile, std::optional<bool> on_blocks) {
    engine::custom::CustomOptions options;
    options.general.over_fused_chain = true;
    options.general.tile = tile;
    options.general.chunks_on_blocks = on_blocks;
    options.general.dense_row_copies = rows16;
    return engine::custom::make_custom_backend(options);
  };
  const size_t per_sample = 784;
  {
    const auto input = testing_support::random_floats(per_sample * 45, 1710u);
    const auto c = testing_support::compare_with_cpu(model, *backend(true, std::nullopt, std::nullopt), input.data(), 45, 45);
    EXPECT_EQ(c.unwritten, 0u);
    EXPECT_LE(c.max_rel_error, kChunkTolerance) << "worst " << c.worst;
  }
  for (int batch : {1, 130}) {
    const auto input = testing_support::random_floats(per_sample * size_t(batch), 1720u + uint32_t(batch));
    const auto old = testing_support::run_backend(model, *backend(false, std::nullopt, std::nullopt), input.data(), batch, batch);
    for (bool on_blocks : {true, false})
      for (int t = 0; t < int(engine::custom::general::GemmTile::Count); ++t) {
        const auto rows16 = testing_support::run_backend(model, *backend(true, t, on_blocks), input.data(), batch, batch);
        for (size_t o = 0; o < old.size(); ++o)
          EXPECT_EQ(testing_support::first_bit_difference(rows16[o], old[o]), old[o].size())
              << "batch " << batch << ", tile " << engine::custom::general::gemm_tile_name(engine::custom::general::GemmTile(t))
              << (on_blocks ? ", chunks on blocks" : ", chunks in one thread") << ", output " << o;
      }
  }
}

// Other chunk rules (GeneralOptions::min_chunk_steps and chunk_target_blocks, constants of the plan):
// still within tolerance of the CPU, and still the same bits for every tile and chunk spreading.
TEST(CustomGeneralChunks, OtherChunkRulesKeepTheBitsAcrossTilesAndSpreads) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = deep_model(1600);
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  for (const auto& [steps, blocks] : std::vector<std::pair<int, int>>{{1, 256}, {3, 1024}, {16, 256}, {1000, 64}}) {
    SCOPED_TRACE("chunks of at least " + std::to_string(steps) + " steps for " + std::to_string(blocks) + " blocks");
    auto backend = general_backend(std::nullopt, std::nullopt, steps, blocks);
    const auto input = testing_support::random_floats(per_sample * 9, 1610u + uint32_t(steps));
    const auto c = testing_support::compare_with_cpu(model, *backend, input.data(), 9, 9);
    EXPECT_EQ(c.unwritten, 0u);
    EXPECT_LE(c.max_rel_error, kChunkTolerance) << "worst " << c.worst;
    custom_general_test::expect_every_tile_gives_the_planned_bits(model, 5, 1620u + uint32_t(steps), {true, false},
                                                                  steps, blocks);
  }
}

// Host only: the chunks cover K exactly once, at least kMinChunkTiles steps each (unless one chunk),
// at most kMaxGemmChunks, and a layer that fills the device at batch 1 keeps K whole.
TEST(CustomGeneralChunksPlan, ChunksCoverKOnceWithinTheLimits) {
  struct Case {
    general::GemmShape s;
    bool pooled;
  };
  auto conv = [](int c, int hw, int oc, int k) {
    general::GemmShape s;
    s.channels = c, s.height = s.width = hw, s.out_channels = oc, s.out_height = s.out_width = hw;
    s.kernel_h = s.kernel_w = k, s.pad_top = s.pad_left = k / 2;
    return s;
  };
  auto dense = [](int in, int units) {
    general::GemmShape s;
    s.dense = true, s.channels = in, s.out_channels = units;
    return s;
  };
  const std::vector<Case> cases = {{conv(64, 7, 128, 3), false}, {conv(128, 7, 33, 5), true}, {conv(1, 28, 32, 3), false},
                                   {conv(3, 32, 64, 3), true},   {conv(32, 28, 32, 3), false}, {dense(784, 512), false},
                                   {dense(9216, 128), false},    {dense(200, 10), false},      {dense(7, 3), false}};
  for (const Case& c : cases) {
    const general::GemmChunks k = general::plan_gemm_chunks(c.s, c.pooled);
    const int64_t ktiles = (c.s.k() + general::kGemmBk - 1) / general::kGemmBk;
    SCOPED_TRACE("K " + std::to_string(c.s.k()) + ", N " + std::to_string(c.s.out_channels));
    EXPECT_GE(k.count, 1);
    EXPECT_LE(k.count, general::kMaxGemmChunks);
    EXPECT_GE(int64_t(k.count) * k.tiles, ktiles);
    EXPECT_LT(int64_t(k.count - 1) * k.tiles, ktiles);  // no empty chunk
    if (k.count > 1) EXPECT_GE(k.tiles, general::kMinChunkTiles);
  }
  EXPECT_GT(general::plan_gemm_chunks(conv(64, 7, 128, 3), false).count, 1);
  EXPECT_EQ(general::plan_gemm_chunks(conv(1, 28, 32, 3), false).count, 1);  // K = 9
  EXPECT_GT(general::plan_gemm_chunks(dense(9216, 128), false).count, 1);
}

}  // namespace

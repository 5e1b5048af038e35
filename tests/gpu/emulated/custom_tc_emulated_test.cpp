// The tensor-core chain's kernel code (engine/custom/fused/tc_chain.cuh) on emulated warps: built
// with -DENGINE_TC_EMULATE, each lane is a host thread and ldmatrix, mma.sync and the shuffles are
// computed from the PTX ISA's fragment layouts (tc_warp.cuh), so the kernel's indexing (pixel orders,
// pool windows, tiles, pairs of warps, partial groups, padded channels and units) is checked on every
// machine, GPU or not, against the reference backend's emulation of the same precision. Slow (a few
// images a second): small batches, one with a partial 16-image group, and two blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <thread>
#include <type_traits>
#include <variant>
#include <utility>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/fused/tc_chain.cuh"
#include "engine/custom/fused/tc_int8_chain.cuh"
#include "engine/custom/fused/tc_chain_plan.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/custom_tc_util.hpp"

namespace {

namespace tc = engine::custom::tc;

// Runs body(shared memory, thread, block) for `blocks` emulated blocks of `threads` host threads, one
// block after another, each with the shared memory (16-byte aligned) of a launch.
template <class Body>
void emulate_blocks(int blocks, int threads, int smem_bytes, Body body) {
  std::vector<float4> smem(size_t(smem_bytes) / 16);
  for (int block = 0; block < blocks; ++block) {
    tc::EmuBlock emu(threads);
    std::vector<std::thread> pool;
    for (int tid = 0; tid < threads; ++tid)
      pool.emplace_back([&, tid] {
        tc::emu_block = &emu;
        tc::emu_thread = tid;
        body(static_cast<void*>(smem.data()), tid, block);
      });
    for (auto& t : pool) t.join();
  }
}

// The kernel body of `version` (1 or 2) for n images on `blocks` emulated blocks, one after another.
template <class T>
std::vector<float> run_emulated(const tc::TcChainPlan& plan, const std::vector<float>& x, int n, int version,
                                int blocks, int tile_images) {
  tc::TcChainParams P = plan.params;
  P.c1 = plan.c1.data(), P.c1_bias = plan.c1_bias.data();
  P.c3 = plan.c3.data(), P.c3_bias = plan.c3_bias.data();
  P.f5 = plan.f5.data(), P.f5_bias = plan.f5_bias.data();
  P.f6 = plan.f6.data(), P.f6_bias = plan.f6_bias.data();
  P.f7 = plan.f7.data(), P.f7_bias = plan.f7_bias.data();
  std::vector<float> y(size_t(n) * size_t(P.units), std::nanf(""));  // poison: every output must be written
  emulate_blocks(blocks, version == 1 ? tc::kSoloWarps * 32 : tc::kPairWarps * 32,
                 version == 1 ? tc::kSoloSmemBytes : tc::kPairSmemBytes, [&](void* smem, int tid, int block) {
                   T* s = static_cast<T*>(smem);
                   if (version == 1)
                     tc::tc_solo_body<T, false, tc::kSigGeneric>(x.data(), P, y.data(), n, s, tid, block, blocks);
                   else if (plan.signature == tc::kSigTanhAvg)
                     tc::tc_pair_body<T, false, tc::kSigTanhAvg>(x.data(), P, y.data(), n, tile_images, s, tid, block,
                                                                 blocks);
                   else if (plan.signature == tc::kSigReluMax)
                     tc::tc_pair_body<T, false, tc::kSigReluMax>(x.data(), P, y.data(), n, tile_images, s, tid, block,
                                                                 blocks);
                   else
                     tc::tc_pair_body<T, false, tc::kSigGeneric>(x.data(), P, y.data(), n, tile_images, s, tid, block,
                                                                 blocks);
                 });
  return y;
}

// The int8 body for n images on `blocks` emulated blocks.
std::vector<float> run_emulated_int8(const tc::TcChainPlan& plan, const std::vector<float>& x, int n, int blocks,
                                     int tile_images) {
  tc::TcInt8Params Q = plan.qparams;
  Q.c1 = plan.q_c1.data(), Q.c3 = plan.q_c3.data(), Q.f5 = plan.q_f5.data(), Q.f6 = plan.q_f6.data();
  Q.f7 = plan.q_f7.data();
  Q.c1_scale = plan.c1_scale.data(), Q.c1_bias = plan.c1_bias.data();
  Q.c3_scale = plan.c3_scale.data(), Q.c3_bias = plan.c3_bias.data();
  Q.f5_scale = plan.f5_scale.data(), Q.f5_bias = plan.f5_bias.data();
  Q.f6_scale = plan.f6_scale.data(), Q.f6_bias = plan.f6_bias.data();
  Q.f7_scale = plan.f7_scale.data(), Q.f7_bias = plan.f7_bias.data();
  std::vector<float> y(size_t(n) * size_t(Q.units), std::nanf(""));
  emulate_blocks(blocks, tc::kQPairs * 64, tc::kQSmemBytes, [&](void* smem, int tid, int block) {
    int8_t* s = static_cast<int8_t*>(smem);
    if (plan.signature == tc::kSigTanhAvg)
      tc::tc_int8_body<false, tc::kSigTanhAvg>(x.data(), Q, y.data(), n, tile_images, s, tid, block, blocks);
    else tc::tc_int8_body<false, tc::kSigGeneric>(x.data(), Q, y.data(), n, tile_images, s, tid, block, blocks);
  });
  return y;
}

tc::TcOperands operands_of(engine::Precision p) {
  return p == engine::Precision::INT8 ? tc::TcOperands::INT8
         : p == engine::Precision::BF16 ? tc::TcOperands::BF16
                                        : tc::TcOperands::FP16;
}

// The kernel body the run asks for on the plan of `model`.
std::vector<float> run_plan(const std::shared_ptr<formats::Model>& model, engine::Precision p,
                            const std::vector<float>& x, int images, int version, int blocks, int tile_images) {
  auto planned = tc::plan_tc_chain(engine::plan_graph(model), operands_of(p));
  if (!std::holds_alternative<tc::TcChainPlan>(planned)) {
    ADD_FAILURE() << std::get<tc::TcRefusal>(planned).why;
    return {};
  }
  const auto& plan = std::get<tc::TcChainPlan>(planned);
  if (p == engine::Precision::INT8) return run_emulated_int8(plan, x, images, blocks, tile_images);
  if (p == engine::Precision::BF16) return run_emulated<__nv_bfloat16>(plan, x, images, version, blocks, tile_images);
  return run_emulated<__half>(plan, x, images, version, blocks, tile_images);
}

struct EmuRun {
  engine::Precision precision;
  int version;
  int images;
  int blocks;
  int tile_images = 16;  // version 2
};

void expect_matches_reference(const tc_test::Family& f, const EmuRun& run) {
  const bool bf16 = run.precision == engine::Precision::BF16, int8 = run.precision == engine::Precision::INT8;
  const auto x = testing_support::random_floats(size_t(run.images) * (f.conv_pad ? 784 : 1024), 900 + f.seed, -1.0f, 1.0f);
  auto model = tc_test::family_model(f);
  if (int8) model = tc_test::calibrated(model, x.data(), run.images);
  const auto got = run_plan(model, run.precision, x, run.images, run.version, run.blocks, run.tile_images);
  engine::CompileOptions options;
  options.precision = run.precision;
  const auto ref = testing_support::run_backend(model, "reference", x.data(), run.images, run.images, options).at(0);
  ASSERT_EQ(got.size(), ref.size());
  double peak = 0, worst = 0;
  for (float r : ref) peak = std::max(peak, std::fabs(double(r)));
  size_t unwritten = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) {
      ++unwritten;
      continue;
    }
    const double scale = std::max({std::fabs(double(ref[i])), 1e-2 * peak, 1e-6});
    worst = std::max(worst, std::fabs(double(got[i]) - double(ref[i])) / scale);
  }
  EXPECT_EQ(unwritten, 0u);
  // The bounds of the GPU tests (tests/gpu/custom_tc_chain_test.cpp, where they are explained).
  // int8: the reference's quantization (std::tanh on both sides), but x * (1 / s) for x / s and fp32
  // sums for double ones can move a value near a rounding boundary one step (1/127 of its range):
  // rare on these few images (measured <= 3.6e-7 with none; one step in a softmax stays under 2e-2).
  EXPECT_LE(worst, int8 ? 2e-2 : bf16 ? 1e-1 : 2e-2);
  std::cout << "[ measured ] emulated tensor-core chain v" << run.version << " " << engine::precision_name(run.precision)
            << " " << f.name << ", " << run.images << " images: max relative error against the emulation " << worst
            << "\n";
}

TEST(CustomTcChainEmulated, Version2Fp16MatchesReferenceEmulation) {
  for (const auto& f : tc_test::families()) {
    SCOPED_TRACE(f.name);
    expect_matches_reference(f, {engine::Precision::FP16, 2, 21, 1});
  }
}

TEST(CustomTcChainEmulated, Version2Bf16TwoBlocks) {
  expect_matches_reference(tc_test::families()[1], {engine::Precision::BF16, 2, 37, 2});
}

// Tiles of 6 images (what a batch too small for 16 per pair of warps gets): rows 3..7 and 11..15 unused.
TEST(CustomTcChainEmulated, Version2SmallTiles) {
  expect_matches_reference(tc_test::families()[0], {engine::Precision::FP16, 2, 17, 1, 6});
}

// int8 against the reference's int8 emulation, calibrated on the inputs themselves: the same
// quantization of every conv and dense input; LeNet-5's signature and the generic kernel, two blocks,
// small tiles.
TEST(CustomTcChainEmulated, Int8MatchesReferenceEmulation) {
  expect_matches_reference(tc_test::families()[0], {engine::Precision::INT8, 2, 21, 1});
  expect_matches_reference(tc_test::families()[2], {engine::Precision::INT8, 2, 19, 2, 4});
  expect_matches_reference(tc_test::families()[3], {engine::Precision::INT8, 2, 9, 1});
}

// A [1, 28, 28] input that c1 pads by 2 (the zoo's LeNet-5s): the kernel stages it into [32][32]
// with zeros around it, so its outputs are the bits of the same model with the padding moved into a
// [1, 32, 32] input; and it matches the reference's emulation. Both kernel versions, bf16 and int8.
TEST(CustomTcChainEmulated, PaddedInputSameBitsAsPaddedModel) {
  const std::pair<EmuRun, int> runs[] = {{{engine::Precision::FP16, 2, 11, 1, 6}, 0},
                                         {{engine::Precision::FP16, 2, 9, 2, 4}, 1},
                                         {{engine::Precision::BF16, 2, 7, 1, 4}, 1},
                                         {{engine::Precision::FP16, 1, 5, 1}, 0},
                                         {{engine::Precision::INT8, 2, 9, 2, 4}, 1},
                                         {{engine::Precision::INT8, 2, 7, 1, 4}, 0}};
  for (const auto& [run, member] : runs) {
    tc_test::Family f = tc_test::families()[size_t(member)];
    f.conv_pad = true;
    f.name += "_conv_pad";
    SCOPED_TRACE(f.name + " " + engine::precision_name(run.precision) + " v" + std::to_string(run.version));
    expect_matches_reference(f, run);
    const auto x = testing_support::random_floats(size_t(run.images) * 784, 950 + f.seed, -1.0f, 1.0f);
    auto padded = tc_test::family_model(f);
    f.conv_pad = false;
    auto unpadded = tc_test::family_model(f);
    if (run.precision == engine::Precision::INT8) {
      padded = tc_test::calibrated(padded, x.data(), run.images);
      unpadded->calibration = padded->calibration;  // the same names, the same ranges
    }
    const auto got = run_plan(padded, run.precision, x, run.images, run.version, run.blocks, run.tile_images);
    const auto want = run_plan(unpadded, run.precision, tc_test::padded_images(x, run.images), run.images,
                               run.version, run.blocks, run.tile_images);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
}

TEST(CustomTcChainEmulated, Version1Fp16) {
  expect_matches_reference(tc_test::families()[2], {engine::Precision::FP16, 1, 19, 1});
}

}  // namespace

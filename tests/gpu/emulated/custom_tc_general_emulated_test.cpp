// The tensor-core general path's dense GEMM (engine/custom/tc_general/tc_dense_gemm.cuh) on emulated
// warps (fused/tc_warp.cuh: lanes as host threads, ldmatrix and mma.sync from the PTX fragment
// layouts), layer after layer on plans from plan_tc_general, against the reference's emulation
// written plainly on the host: input, weights and bias rounded to the format, sums in double, every
// dense output and activation output rounded. Shapes: features not multiples of 4 or 8 (the fp32
// input's scalar loads), units past one 128-column block and below 32, rows not multiples of any
// tile; activation buffers and outputs poisoned. Every tile gives the same bits, and so does every
// batch split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/tc_general/tc_dense_gemm.cuh"
#include "engine/custom/tc_general/tc_general_plan.hpp"
#include "engine/reference/reduced_precision.hpp"
#include "tests/common/model_builder.hpp"

namespace {

namespace tc = engine::custom::tc;
namespace tcg = engine::custom::tcg;
using engine::custom::Activation;
using formats::OpType;
using testing_support::ModelBuilder;

struct Case {
  std::string name;
  std::shared_ptr<formats::Model> model;
  int n;
};

std::vector<Case> cases() {
  return {
      {"[3,5,7] (105 features) -> 150 relu -> 45 tanh -> 10, 37 rows",
       ModelBuilder("mlp_odd", {3, 5, 7})
           .unary("f", OpType::Flatten, "x")
           .dense("d1", "f", 105, 150, 11)
           .unary("r", OpType::Relu, "d1")
           .dense("d2", "r", 150, 45, 12)
           .unary("t", OpType::Tanh, "d2")
           .dense("d3", "t", 45, 10, 13)
           .outputs({"d3"})
           .build(),
       37},
      {"[1,12,12] (144 features, 16-byte loads) -> 200 sigmoid -> 33 -> 7 relu, 130 rows",
       ModelBuilder("mlp_vec", {1, 12, 12})
           .unary("f", OpType::Flatten, "x")
           .dense("d1", "f", 144, 200, 21)
           .unary("s", OpType::Sigmoid, "d1")
           .dense("d2", "s", 200, 33, 22)
           .dense("d3", "d2", 33, 7, 23)
           .unary("r", OpType::Relu, "d3")
           .outputs({"r"})
           .build(),
       130},
      {"333 -> 70 relu (11 stages: every buffer reused) -> 9, 20 rows",
       ModelBuilder("deep_k", {333})
           .dense("d1", "x", 333, 70, 41)
           .unary("r", OpType::Relu, "d1")
           .dense("d2", "r", 70, 9, 42)
           .outputs({"d2"})
           .build(),
       20},
      {"one layer 40 -> 300, 70 rows", ModelBuilder("one", {40}).dense("d", "x", 40, 300, 31).outputs({"d"}).build(),
       70},
  };
}

template <class T, int kTile>
void run_layer(const tcg::TcDenseArgs& a, int m) {
  constexpr tcg::TcgTileShape s = tcg::kTcgTiles[kTile];
  const long long blocks = (m + s.bm - 1) / s.bm * ((a.cols + s.bn - 1) / s.bn);
  std::vector<float4> smem(size_t(tcg::tcg_smem_bytes(s)) / 16);  // shared across blocks: stale data stays
  for (long long b = 0; b < blocks; ++b) {
    tc::EmuBlock emu(s.threads());
    std::vector<std::thread> pool;
    for (int tid = 0; tid < s.threads(); ++tid)
      pool.emplace_back([&, tid] {
        tc::emu_block = &emu;
        tc::emu_thread = tid;
        tc::tc_dense_block<T, s.bm, s.bn, s.wm, s.wn>(a, m, b, tid, reinterpret_cast<unsigned char*>(smem.data()));
      });
    for (auto& t : pool) t.join();
  }
}

template <class T>
void run_layer(const tcg::TcDenseArgs& a, int tile, int m) {
  if (tile == 0) run_layer<T, 0>(a, m);
  else if (tile == 1) run_layer<T, 1>(a, m);
  else run_layer<T, 2>(a, m);
}

// The plan's layers on the first n rows of x, every layer on `tile` (-1: choose_tcg_tile with 132 SMs).
template <class T>
std::vector<float> run_plan(const tcg::TcgPlan& plan, const std::vector<float>& x, int n, int tile) {
  int pitch = 8;
  for (const auto& l : plan.layers) pitch = std::max(pitch, l.ldy);
  std::vector<uint16_t> acts[2] = {std::vector<uint16_t>(size_t(n) * pitch, 0xffff),
                                   std::vector<uint16_t>(size_t(n) * pitch, 0xffff)};
  std::vector<float> y(size_t(n) * plan.layers.back().units, std::nanf(""));
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const tcg::TcgLayer& l = plan.layers[i];
    std::vector<float> bias = l.bias;
    tcg::TcDenseArgs a;
    a.x = l.first ? static_cast<const void*>(x.data()) : acts[(i + 1) % 2].data();
    a.x_f32 = l.first;
    a.ldx = l.ldx;
    a.k = l.first ? l.in_features : l.ldx;
    a.y = l.last ? static_cast<void*>(y.data()) : static_cast<void*>(acts[i % 2].data());
    a.y_f32 = l.last;
    a.ldy = l.ldy;
    a.cols = l.last ? l.units : l.ldy;
    a.w = l.weight.data();
    a.bias = bias.data();
    a.k_padded = l.k_padded;
    a.act = l.act;
    run_layer<T>(a, tile >= 0 ? tile : tcg::choose_tcg_tile(n, a.cols, 132), n);
  }
  return y;
}

// The reference's emulation of the format, written plainly.
std::vector<float> emulate(const formats::Model& model, const std::vector<float>& x, int n, bool bf16) {
  auto r = [&](double v) {
    return bf16 ? engine::reference::round_to_bf16(float(v)) : engine::reference::round_to_fp16(float(v));
  };
  const int in = int(x.size()) / n;
  std::vector<float> cur(x.size());
  for (size_t i = 0; i < x.size(); ++i) cur[i] = r(x[i]);
  int width = in;
  for (const formats::Node& node : model.nodes) {
    if (node.op == OpType::Dense) {
      const int units = int(node.bias->values.size());
      std::vector<float> out(size_t(n) * units);
      for (int m = 0; m < n; ++m)
        for (int o = 0; o < units; ++o) {
          double sum = r(node.bias->values[size_t(o)]);
          for (int k = 0; k < width; ++k)
            sum += double(cur[size_t(m) * width + k]) * double(r(node.weight->values[size_t(o) * width + k]));
          out[size_t(m) * units + o] = r(sum);
        }
      cur = std::move(out);
      width = units;
    } else if (node.op != OpType::Flatten) {
      const Activation act = node.op == OpType::Relu ? Activation::Relu
                             : node.op == OpType::Tanh ? Activation::Tanh
                                                       : Activation::Sigmoid;
      for (float& v : cur) v = r(tc::tc_gemm_act(v, act));
    }
  }
  return cur;
}

class TcGeneralEmulated : public testing::TestWithParam<bool> {};  // bf16?

TEST_P(TcGeneralEmulated, MatchesTheEmulationAndGivesTheSameBitsOnEveryTileAndSplit) {
  const bool bf16 = GetParam();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const engine::Graph graph = engine::plan_graph(c.model);
    auto planned = tcg::plan_tc_general(graph, bf16);
    ASSERT_TRUE(std::holds_alternative<tcg::TcgPlan>(planned)) << std::get<std::string>(planned);
    const tcg::TcgPlan& plan = std::get<tcg::TcgPlan>(planned);
    const int in = int(graph.value(graph.input).elements);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    std::vector<float> x(size_t(c.n) * in);
    for (float& v : x) v = uni(rng);
    auto run = [&](int n, int tile) {
      return bf16 ? run_plan<__nv_bfloat16>(plan, x, n, tile) : run_plan<__half>(plan, x, n, tile);
    };
    const std::vector<float> got = run(c.n, -1);
    const std::vector<float> want = emulate(*c.model, x, c.n, bf16);
    ASSERT_EQ(got.size(), want.size());
    double peak = 0, worst = 0;
    for (float v : want) peak = std::max(peak, double(std::fabs(v)));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << "output " << i << " not written";
      worst = std::max(worst, double(std::fabs(got[i] - want[i])));
    }
    // Both sides round at the same points; fp32 sums against double move a rounding by one step at
    // most now and then: a few units of the format's last place of the peak.
    EXPECT_LE(worst, (bf16 ? 3e-2 : 4e-3) * std::max(peak, 1.0)) << "peak " << peak;
    std::cout << "[ emulated ] " << (bf16 ? "bf16 " : "fp16 ") << c.name << ": max |error| " << worst << ", peak "
              << peak << "\n";
    for (int tile = 0; tile < tcg::kTcgTileCount; ++tile) {
      const auto t = run(c.n, tile);
      EXPECT_EQ(std::memcmp(t.data(), got.data(), got.size() * sizeof(float)), 0) << "tile " << tile;
    }
    const size_t units = got.size() / size_t(c.n);
    for (int n : {1, 7}) {
      const auto part = run(n, -1);
      EXPECT_EQ(std::memcmp(part.data(), got.data(), part.size() * sizeof(float)), 0) << "batch " << n;
      ASSERT_EQ(part.size(), units * size_t(n));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Format, TcGeneralEmulated, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& i) { return std::string(i.param ? "bf16" : "fp16"); });

// What the plan refuses, naming the node.
TEST(TcGeneralPlan, RefusesWhatItDoesNotTake) {
  const auto conv = ModelBuilder("conv", {1, 6, 6})
                        .conv2d("c", "x", 1, 2, testing_support::window(3, 3, 1, 1), 41)
                        .unary("f", OpType::Flatten, "c")
                        .dense("d", "f", 32, 3, 42)
                        .outputs({"d"})
                        .build();
  auto p = tcg::plan_tc_general(engine::plan_graph(conv), false);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("node 'c' (conv2d)"), std::string::npos) << std::get<std::string>(p);
  const auto two_outputs = ModelBuilder("two", {8})
                               .dense("d1", "x", 8, 4, 43)
                               .unary("r", OpType::Relu, "d1")
                               .dense("d2", "r", 4, 2, 44)
                               .outputs({"d2", "d1"})
                               .build();
  p = tcg::plan_tc_general(engine::plan_graph(two_outputs), false);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("2 graph outputs"), std::string::npos) << std::get<std::string>(p);
}

}  // namespace

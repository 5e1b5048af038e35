// The tensor-core general path's dense / conv2d GEMM and maxpool (engine/custom/tc_general/tc_dense_gemm.cuh)
// on emulated warps (fused/tc_warp.cuh: lanes as host threads, ldmatrix and mma.sync from the PTX fragment
// layouts), layer after layer on plans from plan_tc_general, against the reference's emulation
// written plainly on the host: input, weights and bias rounded to the format, sums in double, every
// dense output and activation output rounded. Shapes: features not multiples of 4 or 8 (the fp32
// input's scalar loads), units past one 128-column block and below 32, rows not multiples of any
// tile; convolutions 3x3 and 5x5, 'same' and 'valid', stride 1 and 2, odd channels (padded to 8)
// and odd image sizes, max pools with and without padding, the NCHW flatten into a dense layer, a
// two-branch concat, residual blocks (a strided 1x1 shortcut) and a global average pool;
// activation buffers and outputs poisoned. Every tile gives the same bits (fp16), and so does every
// batch split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
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
  int split = 7;  // a batch split checked besides 1 (convolutions: fewer images of many rows each)
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
      {"[1,12,12] (144 features, 16-byte loads) -> 200 sigmoid -> 33 -> 7 relu, 70 rows",
       ModelBuilder("mlp_vec", {1, 12, 12})
           .unary("f", OpType::Flatten, "x")
           .dense("d1", "f", 144, 200, 21)
           .unary("s", OpType::Sigmoid, "d1")
           .dense("d2", "s", 200, 33, 22)
           .dense("d3", "d2", 33, 7, 23)
           .unary("r", OpType::Relu, "d3")
           .outputs({"r"})
           .build(),
       70},
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
      {"[3,6,7] conv 3x3 same -> 12 relu -> conv 3x3 valid -> 5 tanh -> maxpool 2x2 (4x5 -> 2x2) -> 10, 5 images",
       ModelBuilder("conv_odd", {3, 6, 7})
           .conv2d("c1", "x", 3, 12, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 51)
           .unary("r1", OpType::Relu, "c1")
           .conv2d("c2", "r1", 12, 5, testing_support::window(3, 3, 1, 1), 52)
           .unary("t2", OpType::Tanh, "c2")
           .pool("p", OpType::MaxPool, "t2", testing_support::window(2, 2, 2, 2))
           .unary("f", OpType::Flatten, "p")
           .dense("d", "f", 20, 10, 53)
           .outputs({"d"})
           .build(),
       5, 3},
      {"[1,6,6] conv 5x5 pad 2 -> 20 relu -> maxpool 3x3 stride 2 pad 1 -> conv 3x3 stride 2 pad 1 -> 40 sigmoid -> "
       "dense 7 relu, 5 images",
       ModelBuilder("conv_5x5", {1, 6, 6})
           .conv2d("c1", "x", 1, 20, testing_support::window(5, 5, 1, 1, 2, 2, 2, 2), 61)
           .unary("r1", OpType::Relu, "c1")
           .pool("p", OpType::MaxPool, "r1", testing_support::window(3, 3, 2, 2, 1, 1, 1, 1))
           .conv2d("c2", "p", 20, 40, testing_support::window(3, 3, 2, 2, 1, 1, 1, 1), 62)
           .unary("s2", OpType::Sigmoid, "c2")
           .unary("f", OpType::Flatten, "s2")
           .dense("d", "f", 160, 7, 63)
           .unary("r", OpType::Relu, "d")
           .outputs({"r"})
           .build(),
       5, 3},
      {"[1,9,7] conv 3x3 same -> 8 relu, branches 1x1 -> 16 relu and 3x3 -> 8 tanh, concat (24) -> maxpool 2x2 "
       "-> conv 3x3 -> 12 -> dense 5 (the stem read twice), 5 images",
       ModelBuilder("concat", {1, 9, 7})
           .conv2d("s", "x", 1, 8, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 71)
           .unary("sr", OpType::Relu, "s")
           .conv2d("b1", "sr", 8, 16, testing_support::window(1, 1, 1, 1), 72)
           .unary("b1r", OpType::Relu, "b1")
           .conv2d("b2", "sr", 8, 8, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 73)
           .unary("b2t", OpType::Tanh, "b2")
           .concat("cat", {"b1r", "b2t"})
           .pool("p", OpType::MaxPool, "cat", testing_support::window(2, 2, 2, 2))
           .conv2d("c", "p", 24, 12, testing_support::window(3, 3, 1, 1), 74)
           .unary("f", OpType::Flatten, "c")
           .dense("d", "f", 24, 5, 75)
           .outputs({"d"})
           .build(),
       5, 3},
      {"[3,8,6] conv 3x3 -> 16 relu, a residual block (3x3 -> relu -> 3x3 + add -> relu), one with a 1x1 stride-2 "
       "shortcut (3x3 stride 2 -> relu -> 3x3, add) -> global avgpool -> dense 4, 4 images",
       ModelBuilder("residual", {3, 8, 6})
           .conv2d("s", "x", 3, 16, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 81)
           .unary("sr", OpType::Relu, "s")
           .conv2d("a1", "sr", 16, 16, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 82)
           .unary("a1r", OpType::Relu, "a1")
           .conv2d("a2", "a1r", 16, 16, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 83)
           .add("aa", "a2", "sr")
           .unary("ar", OpType::Relu, "aa")
           .conv2d("b1", "ar", 16, 24, testing_support::window(3, 3, 2, 2, 1, 1, 1, 1), 84)
           .unary("b1r", OpType::Relu, "b1")
           .conv2d("b2", "b1r", 24, 24, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 85)
           .conv2d("bs", "ar", 16, 24, testing_support::window(1, 1, 2, 2), 86)
           .add("ba", "b2", "bs")
           .unary("br", OpType::Relu, "ba")
           .pool("g", OpType::AvgPool, "br", testing_support::window(4, 3, 1, 1), false)
           .unary("f", OpType::Flatten, "g")
           .dense("d", "f", 24, 4, 87)
           .outputs({"d"})
           .build(),
       4, 3},
  };
}

template <class T, int kTile>
void run_layer(const tcg::TcDenseArgs& a, int m) {
  constexpr tcg::TcgTileShape s = tcg::kTcgTiles[kTile];
  const long long blocks = (m + s.bm - 1) / s.bm * ((a.cols + s.bn - 1) / s.bn);
  std::vector<float4> smem(size_t(tcg::tcg_smem_bytes(s)) / 16);  // shared across blocks: stale data stays
  // One set of threads runs the blocks one after another (a barrier between them), as blocks that
  // follow each other on one multiprocessor.
  tc::EmuBlock emu(s.threads());
  std::vector<std::thread> pool;
  for (int tid = 0; tid < s.threads(); ++tid)
    pool.emplace_back([&, tid] {
      tc::emu_block = &emu;
      tc::emu_thread = tid;
      unsigned char* sm = reinterpret_cast<unsigned char*>(smem.data());
      for (long long b = 0; b < blocks; ++b) {
        switch (tcg::tcg_read_of(a)) {
          case tcg::TcgRead::Rows: tc::tc_dense_block<T, s.bm, s.bn, s.wm, s.wn, 0>(a, m, b, tid, sm); break;
          case tcg::TcgRead::Pixels16: tc::tc_dense_block<T, s.bm, s.bn, s.wm, s.wn, 1>(a, m, b, tid, sm); break;
          case tcg::TcgRead::Image32: tc::tc_dense_block<T, s.bm, s.bn, s.wm, s.wn, 2>(a, m, b, tid, sm); break;
        }
        tc::sync_block();  // every thread is done with this block's shared memory
      }
    });
  for (auto& t : pool) t.join();
}

template <class T>
void run_layer(const tcg::TcDenseArgs& a, int tile, int m) {
  if (tile == 0) run_layer<T, 0>(a, m);
  else if (tile == 1) run_layer<T, 1>(a, m);
  else run_layer<T, 2>(a, m);
}

// The plan's layers on the first n images of x, every GEMM on `tile` (-1: choose_tcg_tile with 132 SMs).
template <class T>
std::vector<float> run_plan(const tcg::TcgPlan& plan, const std::vector<float>& x, int n, int tile) {
  std::vector<std::vector<uint16_t>> acts;
  for (long long per_image : plan.buffers) acts.emplace_back(size_t(n * per_image), uint16_t(0xffff));
  std::vector<float> y(size_t(n) * plan.layers.back().units, std::nanf(""));
  for (const tcg::TcgLayer& l : plan.layers) {
    const void* in = l.in_buffer < 0 ? static_cast<const void*>(x.data()) : acts[size_t(l.in_buffer)].data();
    void* out = l.last ? static_cast<void*>(y.data()) : acts[size_t(l.out_buffer)].data() + l.out_offset;
    if (l.kind == tcg::TcgKind::Pool) {
      tcg::TcPoolArgs p;
      p.x = static_cast<const uint16_t*>(in);
      p.y = static_cast<uint16_t*>(out);
      p.h = l.conv.h, p.w = l.conv.w, p.oh = l.conv.oh, p.ow = l.conv.ow, p.pitch = l.conv.pitch;
      p.kh = l.conv.kh, p.kw = l.conv.kw, p.sh = l.conv.sh, p.sw = l.conv.sw, p.pt = l.conv.pt, p.pl = l.conv.pl;
      p.average = l.average, p.count_include_pad = l.count_include_pad;
      for (long long q = 0; q < (long long)n * p.oh * p.ow * (p.pitch / 8); ++q) tc::tc_pool_piece<T>(p, q);
      continue;
    }
    std::vector<float> bias = l.bias;
    tcg::TcDenseArgs a;
    a.x = in;
    a.x_f32 = l.first;
    a.ldx = l.ldx;
    a.k = l.kind == tcg::TcgKind::Conv || l.first ? l.in_features : l.ldx;
    a.y = out;
    a.y_f32 = l.last;
    a.ldy = l.ldy;
    a.cols = l.cols;
    a.w = l.weight.data();
    a.bias = bias.data();
    a.k_padded = l.k_padded;
    a.act = l.act;
    if (l.kind == tcg::TcgKind::Conv) a.conv = l.conv;
    if (l.res_buffer >= 0) a.res = acts[size_t(l.res_buffer)].data(), a.ldres = l.res_pitch, a.post_act = l.post_act;
    const int m = n * l.rows_per_image;
    run_layer<T>(a, tile >= 0 ? tile : tcg::choose_tcg_tile(m, a.cols, 132), m);
  }
  return y;
}

// The reference's emulation of the format, written plainly on NCHW images, value by value.
std::vector<float> emulate(const formats::Model& model, const std::vector<float>& x, int n, bool bf16) {
  auto r = [&](double v) {
    return bf16 ? engine::reference::round_to_bf16(float(v)) : engine::reference::round_to_fp16(float(v));
  };
  struct Tensor {
    std::vector<float> v;  // [n][c][h][w] or [n][width]
    int ch = 0, h = 1, w = 1;
  };
  std::map<std::string, Tensor> values;
  {
    const formats::Shape& s = model.input.shape;
    Tensor in;
    in.ch = int(s[0]), in.h = s.size() == 3 ? int(s[1]) : 1, in.w = s.size() == 3 ? int(s[2]) : 1;
    if (s.size() != 3) in.ch = int(x.size()) / n;
    for (float v : x) in.v.push_back(r(v));
    values["x"] = std::move(in);
  }
  for (const formats::Node& node : model.nodes) {
    const Tensor& cur = values.at(node.inputs[0]);
    const int ch = cur.ch, h = cur.h, w = cur.w, width = ch * h * w;
    const formats::Window2D& win = node.window;
    Tensor out;
    if (node.op == OpType::Dense) {
      const int units = int(node.bias->values.size());
      out.ch = units;
      out.v.resize(size_t(n) * units);
      for (int m = 0; m < n; ++m)
        for (int o = 0; o < units; ++o) {
          double sum = r(node.bias->values[size_t(o)]);
          for (int k = 0; k < width; ++k)
            sum += double(cur.v[size_t(m) * width + k]) * double(r(node.weight->values[size_t(o) * width + k]));
          out.v[size_t(m) * units + o] = r(sum);
        }
    } else if (node.op == OpType::Concat) {
      out = cur;
      out.v.clear();
      out.ch = 0;
      for (const std::string& name : node.inputs) out.ch += values.at(name).ch;
      for (int m = 0; m < n; ++m)
        for (const std::string& name : node.inputs) {
          const Tensor& t = values.at(name);
          const size_t per = size_t(t.ch) * h * w;
          out.v.insert(out.v.end(), t.v.begin() + long(m * per), t.v.begin() + long((m + 1) * per));
        }
    } else if (node.op == OpType::Add) {
      out = cur;
      const Tensor& b = values.at(node.inputs[1]);
      for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = r(double(out.v[i]) + double(b.v[i]));
    } else if (node.op == OpType::Conv2D || node.op == OpType::MaxPool || node.op == OpType::AvgPool) {
      const bool pool = node.op != OpType::Conv2D, average = node.op == OpType::AvgPool;
      const int oc = node.op == OpType::Conv2D ? node.out_channels : ch;
      const int oh = (h + win.pad_top + win.pad_bottom - win.kernel_h) / win.stride_h + 1;
      const int ow = (w + win.pad_left + win.pad_right - win.kernel_w) / win.stride_w + 1;
      out.ch = oc, out.h = oh, out.w = ow;
      out.v.resize(size_t(n) * oc * oh * ow);
      for (int m = 0; m < n; ++m)
        for (int o = 0; o < oc; ++o)
          for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox) {
              double sum = !pool ? r(node.bias->values[size_t(o)]) : average ? 0.0 : -INFINITY;
              int inside = 0;
              for (int c = 0; c < ch; ++c) {
                if (pool && c != o) continue;
                for (int ky = 0; ky < win.kernel_h; ++ky)
                  for (int kx = 0; kx < win.kernel_w; ++kx) {
                    const int iy = oy * win.stride_h - win.pad_top + ky, ix = ox * win.stride_w - win.pad_left + kx;
                    if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                    const double v = cur.v[((size_t(m) * ch + c) * h + iy) * w + ix];
                    ++inside;
                    if (average) {
                      sum += v;
                    } else if (pool) {
                      sum = std::max(sum, v);
                    } else {
                      const size_t at = ((size_t(o) * ch + c) * win.kernel_h + ky) * win.kernel_w + kx;
                      sum += v * double(r(node.weight->values[at]));
                    }
                  }
              }
              if (average) sum /= node.count_include_pad ? win.kernel_h * win.kernel_w : inside;
              out.v[((size_t(m) * oc + o) * oh + oy) * ow + ox] = r(sum);
            }
    } else if (node.op == OpType::Flatten) {
      out = cur;
    } else {
      const Activation act = node.op == OpType::Relu ? Activation::Relu
                             : node.op == OpType::Tanh ? Activation::Tanh
                                                       : Activation::Sigmoid;
      out = cur;
      for (float& v : out.v) v = r(tc::tc_gemm_act(v, act));
    }
    values[node.name] = std::move(out);
  }
  return values.at(model.outputs.at(0)).v;
}

class TcGeneralEmulated : public testing::TestWithParam<bool> {};  // bf16?

TEST_P(TcGeneralEmulated, MatchesTheEmulationAndGivesTheSameBitsOnEveryTileAndSplit) {
  const bool bf16 = GetParam();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const engine::Graph graph = engine::plan_graph(c.model);
    auto planned = tcg::plan_tc_general(graph, bf16, true);
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
    // Forced tiles in fp16 only: bf16 differs in the mma alone, and the emulation is slow (the GPU
    // tests force every tile in both).
    for (int tile = 0; tile < (bf16 ? 0 : tcg::kTcgTileCount); ++tile) {
      const auto t = run(c.n, tile);
      EXPECT_EQ(std::memcmp(t.data(), got.data(), got.size() * sizeof(float)), 0) << "tile " << tile;
    }
    const size_t units = got.size() / size_t(c.n);
    for (int n : {1, c.split}) {
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
  auto p = tcg::plan_tc_general(engine::plan_graph(conv), false, false);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("node 'c' (conv2d): convolutions are off"), std::string::npos)
      << std::get<std::string>(p);
  EXPECT_TRUE(std::holds_alternative<tcg::TcgPlan>(tcg::plan_tc_general(engine::plan_graph(conv), false, true)));
  const auto avg = ModelBuilder("avg", {2, 6, 6})
                       .conv2d("c", "x", 2, 4, testing_support::window(3, 3, 1, 1), 45)
                       .pool("p", OpType::AvgPool, "c", testing_support::window(2, 2, 2, 2))
                       .unary("a", OpType::Relu, "p")
                       .unary("f", OpType::Flatten, "a")
                       .dense("d", "f", 16, 3, 46)
                       .outputs({"d"})
                       .build();
  p = tcg::plan_tc_general(engine::plan_graph(avg), false, true);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("node 'a' (relu): an activation not the only reader"), std::string::npos)
      << std::get<std::string>(p);
  const auto odd_concat = ModelBuilder("odd_concat", {1, 6, 6})
                              .conv2d("a", "x", 1, 8, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 48)
                              .conv2d("b", "x", 1, 4, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 49)
                              .concat("cat", {"a", "b"})
                              .unary("f", OpType::Flatten, "cat")
                              .dense("d", "f", 432, 3, 50)
                              .outputs({"d"})
                              .build();
  p = tcg::plan_tc_general(engine::plan_graph(odd_concat), false, true);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("node 'cat' (concat): its inputs are not all conv2d outputs"),
            std::string::npos)
      << std::get<std::string>(p);
  const auto twice = ModelBuilder("twice", {1, 6, 6})
                         .conv2d("a", "x", 1, 8, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 51)
                         .conv2d("b", "a", 8, 8, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 52)
                         .concat("cat", {"b", "b"})
                         .unary("f", OpType::Flatten, "cat")
                         .dense("d", "f", 576, 3, 53)
                         .outputs({"d"})
                         .build();
  p = tcg::plan_tc_general(engine::plan_graph(twice), false, true);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("node 'cat' (concat): its input 'b' is not a slice it owns"),
            std::string::npos)
      << std::get<std::string>(p);
  const auto doubled = ModelBuilder("doubled", {1, 6, 6})
                           .conv2d("a", "x", 1, 8, testing_support::window(3, 3, 1, 1, 1, 1, 1, 1), 54)
                           .add("aa", "a", "a")
                           .unary("f", OpType::Flatten, "aa")
                           .dense("d", "f", 288, 3, 55)
                           .outputs({"d"})
                           .build();
  p = tcg::plan_tc_general(engine::plan_graph(doubled), false, true);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("node 'aa' (add): not an add of a conv2d layer's output and another"),
            std::string::npos)
      << std::get<std::string>(p);
  const auto conv_out = ModelBuilder("conv_out", {1, 6, 6})
                            .conv2d("c", "x", 1, 2, testing_support::window(3, 3, 1, 1), 47)
                            .outputs({"c"})
                            .build();
  p = tcg::plan_tc_general(engine::plan_graph(conv_out), false, true);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("does not end with a dense layer"), std::string::npos)
      << std::get<std::string>(p);
  const auto two_outputs = ModelBuilder("two", {8})
                               .dense("d1", "x", 8, 4, 43)
                               .unary("r", OpType::Relu, "d1")
                               .dense("d2", "r", 4, 2, 44)
                               .outputs({"d2", "d1"})
                               .build();
  p = tcg::plan_tc_general(engine::plan_graph(two_outputs), false, true);
  ASSERT_TRUE(std::holds_alternative<std::string>(p));
  EXPECT_NE(std::get<std::string>(p).find("2 graph outputs"), std::string::npos) << std::get<std::string>(p);
}

}  // namespace

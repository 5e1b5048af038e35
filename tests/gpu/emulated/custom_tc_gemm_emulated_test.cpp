// tc_gemm_forward's kernel body (engine/custom/tc_gemm.cuh: the per-node tensor-core conv2d / dense
// of --precision fp16|bf16|int8) on emulated warps (fused/tc_warp.cuh: lanes as host threads, mma.sync
// from the PTX fragment layouts), against the same arithmetic written plainly on the host: operands
// rounded (fp16/bf16) or quantized (int8) as the kernel defines it, sums in double (int8: exact
// integers, so the int8 results must be the same bits), bias and activation. Shapes: strides,
// asymmetric padding, k not a multiple of a stage, channel counts below 8 and above 32, partial row
// tiles, several blocks; outputs poisoned with NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/custom/tc_gemm.cuh"
#include "engine/custom/tc_gemm_weights.hpp"
#include "engine/reference/reduced_precision.hpp"

namespace {

namespace tc = engine::custom::tc;
using engine::custom::Activation;
using engine::custom::TcGemmArgs;
using engine::custom::TcGemmOperands;
using engine::custom::TcGemmShape;

struct Case {
  std::string name;
  TcGemmShape shape;
  int n;
  Activation act;
};

TcGemmShape conv(int c, int h, int w, int oc, int k, int stride, int pad_top, int pad_left, int pad_bottom,
                 int pad_right) {
  TcGemmShape s;
  s.channels = c, s.height = h, s.width = w, s.out_channels = oc;
  s.kernel_h = k, s.kernel_w = k + 1;  // rectangular on purpose
  s.stride_h = stride, s.stride_w = stride;
  s.pad_top = pad_top, s.pad_left = pad_left;
  s.out_height = (h + pad_top + pad_bottom - s.kernel_h) / stride + 1;
  s.out_width = (w + pad_left + pad_right - s.kernel_w) / stride + 1;
  return s;
}

TcGemmShape dense(int in, int units) {
  TcGemmShape s;
  s.channels = in, s.out_channels = units;
  return s;
}

std::vector<Case> cases() {
  return {
      {"conv 3x9x11 -> 5, 2x3 stride 1 pad (1,0,0,2)", conv(3, 9, 11, 5, 2, 1, 1, 0, 0, 2), 3, Activation::Relu},
      {"conv 4x13x7 -> 37, 3x4 stride 2 pad (1,2,1,1)", conv(4, 13, 7, 37, 3, 2, 1, 2, 1, 1), 2, Activation::Tanh},
      {"conv 1x8x8 -> 6, 5x6 pad 2", conv(1, 8, 8, 6, 5, 1, 2, 2, 2, 2), 2, Activation::None},
      {"dense 77 -> 13", dense(77, 13), 70, Activation::Sigmoid},
      {"dense 130 -> 40", dense(130, 40), 5, Activation::None},
      {"dense 130 -> 40, 300 samples (5 row tiles, a partial last one)", dense(130, 40), 300, Activation::Tanh},
      {"dense 70 -> 150 (two wide column tiles, a partial second)", dense(70, 150), 67, Activation::Relu},
      {"dense 100 -> 150 (rows of 16-byte loads, a partial last stage)", dense(100, 150), 67, Activation::None},
  };
}

float round_op(float v, TcGemmOperands ops) {
  return ops == TcGemmOperands::BF16 ? engine::reference::round_to_bf16(v) : engine::reference::round_to_fp16(v);
}

float act(float v, Activation a) { return tc::tc_gemm_act(v, a); }

// Runs the body of every block of the launch on emulated warps, with blocks of `cols` channels.
template <int kCols>
std::vector<float> run_emulated(const TcGemmArgs& a, TcGemmOperands ops, int n) {
  const long long rows = (long long)n * a.shape.out_height * a.shape.out_width;
  const int blocks_m = int((rows + engine::custom::kTcGemmRows - 1) / engine::custom::kTcGemmRows);
  const int blocks_n = (a.shape.out_channels + kCols - 1) / kCols;
  std::vector<float4> smem(size_t(engine::custom::tc_gemm_smem_bytes(kCols)) / 16);
  for (int bm = 0; bm < blocks_m; ++bm)
    for (int bn = 0; bn < blocks_n; ++bn) {
      tc::EmuBlock emu(engine::custom::kTcGemmThreads);
      std::vector<std::thread> pool;
      for (int tid = 0; tid < engine::custom::kTcGemmThreads; ++tid)
        pool.emplace_back([&, tid] {
          tc::emu_block = &emu;
          tc::emu_thread = tid;
          auto* s = reinterpret_cast<unsigned char*>(smem.data());
          switch (ops) {
            case TcGemmOperands::FP16: tc::tc_gemm_block<0, kCols>(a, n, bm, bn, tid, s); break;
            case TcGemmOperands::BF16: tc::tc_gemm_block<1, kCols>(a, n, bm, bn, tid, s); break;
            case TcGemmOperands::INT8: tc::tc_gemm_block<2, kCols>(a, n, bm, bn, tid, s); break;
          }
        });
      for (auto& t : pool) t.join();
    }
  return std::vector<float>(a.y, a.y + size_t(n) * a.shape.out_channels * a.shape.out_height * a.shape.out_width);
}

class TcGemmEmulated : public testing::TestWithParam<TcGemmOperands> {};

TEST_P(TcGemmEmulated, MatchesPlainHostArithmetic) {
  const TcGemmOperands ops = GetParam();
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const TcGemmShape& s = c.shape;
    const int K = s.k(), OC = s.out_channels, OHW = s.out_height * s.out_width, HW = s.height * s.width;
    formats::Node node;
    node.name = "layer";
    node.op = s.kernel_h * s.kernel_w * HW == 1 ? formats::OpType::Dense : formats::OpType::Conv2D;
    node.weight = formats::Tensor{"w", {OC, K}, {}};
    node.bias = formats::Tensor{"b", {OC}, {}};
    for (int i = 0; i < OC * K; ++i) node.weight->values.push_back(0.5f * uni(rng));
    node.weight->values[0] = 0.0f;  // a zero row end to end for int8: channel 0's other weights stay
    for (int i = 0; i < OC; ++i) node.bias->values.push_back(uni(rng));
    std::vector<float> x(size_t(c.n) * s.channels * HW);
    for (float& v : x) v = 2.0f * uni(rng);
    const float in_range = 1.5f;  // some inputs past the calibrated range: they clamp to +-127
    const float in_scale = ops == TcGemmOperands::INT8 ? in_range / 127.0f : 0.0f;
    const auto w = engine::custom::tc_gemm_weights(node, OC, K, ops, in_scale);
    std::vector<float> y(size_t(c.n) * OC * OHW, std::nanf(""));
    TcGemmArgs a;
    a.x = x.data(), a.y = y.data(), a.weight = w.operands.data(), a.bias = w.bias.data();
    a.scale = w.scale.empty() ? nullptr : w.scale.data();
    a.in_scale = in_scale, a.k_padded = w.k_padded, a.shape = s, a.activation = c.act;
    const auto got = run_emulated<engine::custom::kTcGemmCols>(a, ops, c.n);
    // Wide blocks (128 channels): the same bits as narrow ones, outputs poisoned again.
    std::fill(y.begin(), y.end(), std::nanf(""));
    const auto wide = run_emulated<engine::custom::kTcGemmWideCols>(a, ops, c.n);
    EXPECT_EQ(std::memcmp(got.data(), wide.data(), got.size() * sizeof(float)), 0) << "wide blocks";

    // The host's plain loop: operands as the kernel's conversions define them.
    double worst = 0;
    for (int img = 0; img < c.n; ++img)
      for (int o = 0; o < OC; ++o)
        for (int p = 0; p < OHW; ++p) {
          const int oy = p / s.out_width, ox = p % s.out_width;
          double sum = 0;
          int64_t isum = 0;
          float row_max = 0;
          for (int i = 0; i < K; ++i) row_max = std::fmax(row_max, std::fabs(node.weight->values[size_t(o) * K + i]));
          const float s_o = row_max / 127.0f;
          for (int ci = 0; ci < s.channels; ++ci)
            for (int ky = 0; ky < s.kernel_h; ++ky)
              for (int kx = 0; kx < s.kernel_w; ++kx) {
                const int iy = oy * s.stride_h - s.pad_top + ky, ix = ox * s.stride_w - s.pad_left + kx;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                const float xv = x[(size_t(img) * s.channels + ci) * HW + size_t(iy) * s.width + ix];
                const float wv = node.weight->values[size_t(o) * K + (ci * s.kernel_h + ky) * s.kernel_w + kx];
                if (ops == TcGemmOperands::INT8) {
                  const float q = std::nearbyint(xv / in_scale);  // the emulation's: an IEEE division
                  const int64_t qx = int64_t(std::fmax(-127.0f, std::fmin(127.0f, q)));
                  const int64_t qw = s_o == 0 ? 0 : int64_t(std::fmax(-127.f, std::fmin(127.f, std::nearbyint(wv / s_o))));
                  isum += qx * qw;
                } else {
                  sum += double(round_op(xv, ops)) * double(round_op(wv, ops));
                }
              }
          const float want = ops == TcGemmOperands::INT8
                                 ? act(std::fmaf(float(isum), in_scale * s_o, node.bias->values[size_t(o)]), c.act)
                                 : act(float(sum + node.bias->values[size_t(o)]), c.act);
          const float have = got[(size_t(img) * OC + o) * OHW + p];
          ASSERT_FALSE(std::isnan(have)) << "output not written: image " << img << " channel " << o << " pixel " << p;
          if (ops == TcGemmOperands::INT8)
            ASSERT_EQ(have, want) << "image " << img << " channel " << o << " pixel " << p;
          worst = std::max(worst, double(std::fabs(have - want)));
        }
    // fp32 sums of K exact products against double: a few float ulps of the sum's terms.
    EXPECT_LE(worst, 2e-5 * K) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Operands, TcGemmEmulated,
                         testing::Values(TcGemmOperands::FP16, TcGemmOperands::BF16, TcGemmOperands::INT8),
                         [](const testing::TestParamInfo<TcGemmOperands>& i) {
                           return std::string(i.param == TcGemmOperands::FP16   ? "fp16"
                                              : i.param == TcGemmOperands::BF16 ? "bf16"
                                                                                : "int8");
                         });

}  // namespace

namespace {

// tc_quantize (engine/gpu/quantize_value.cuh, also the cudnn backend's int8 kernels') multiplies by 1 / s and falls back to the division only near a half-integer: the same
// q as clamp(rne(x / s)) for every x, checked on exact ties ((k + 1/2) s), their neighbours one ulp
// away, random values, values past the clamp, zeros and non-finite ones, for several scales.
TEST(TcQuantize, EqualsTheIeeeDivision) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-200.0f, 200.0f);
  auto expected = [](float x, float s) {
    if (s == 0.0f) return 0;
    return int(std::fmax(-127.0f, std::fmin(127.0f, std::nearbyint(x / s))));
  };
  int checked = 0;
  for (float range : {1.0f, 0.999954f, 3.7f, 1e-3f, 250.0f, 6.1e4f}) {
    const float s = range / 127.0f, inv = 1.0f / s;
    std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, std::nanf(""), 1e30f, -1e30f};
    for (int k = -140; k <= 140; ++k) {
      const float tie = (float(k) + 0.5f) * s;
      xs.push_back(tie);
      xs.push_back(std::nextafter(tie, INFINITY));
      xs.push_back(std::nextafter(tie, -INFINITY));
      xs.push_back(float(k) * s);
    }
    for (int i = 0; i < 200000; ++i) xs.push_back(uni(rng) * s);
    for (const float x : xs) {
      ASSERT_EQ(tc::tc_quantize(x, s, inv), expected(x, s)) << "x " << x << " s " << s;
      ++checked;
    }
  }
  EXPECT_EQ(tc::tc_quantize(1.0f, 0.0f, 0.0f), 0);
  EXPECT_GT(checked, 1000000);
}

}  // namespace

// The reference backend's emulated precisions (engine/reference/reduced_precision.hpp): the rounding
// and quantization functions on values whose answers are known, then whole models against the
// definitions recomputed here (fp16 with the compiler's _Float16; int8 with the calibration's
// scales and per-channel weight scales), the refusals (int8 without calibration, a range missing,
// a backend that does not compute a precision).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/reference/reduced_precision.hpp"
#include "tests/common/model_builder.hpp"

namespace {

using engine::reference::fake_quantize;
using engine::reference::quantize_per_channel;
using engine::reference::round_to_bf16;
using engine::reference::round_to_fp16;
using formats::OpType;
using testing_support::ModelBuilder;

TEST(ReducedPrecision, RoundingFunctionsMatchTheFormats) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);                   // a tie: to even
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 1.0f + 0x1p-6f);  // a tie: to even (up)
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-12f), 1.0f + 0x1p-7f);  // above the tie: up
  EXPECT_TRUE(std::isinf(round_to_bf16(INFINITY)));
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
  EXPECT_EQ(round_to_fp16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_to_fp16(65520.0f)));  // past the largest half: infinity
  EXPECT_EQ(round_to_fp16(1.0f + 0x1p-11f), 1.0f);   // a tie: to even
  EXPECT_EQ(round_to_fp16(0x1p-25f), 0.0f);          // half the smallest subnormal: to even (0)
  EXPECT_EQ(round_to_fp16(0x1p-24f * 1.5f), 0x1p-23f);  // a subnormal tie: to even (2 x 2^-24)
  EXPECT_EQ(round_to_fp16(-(1.0f + 0x1p-10f)), -(1.0f + 0x1p-10f));
#if defined(__FLT16_MANT_DIG__) && defined(__GNUC__) && !defined(__clang__)
  // Where the compiler has _Float16 (GCC on x86-64), the written-out rounding agrees with it
  // everywhere: random bit patterns over every exponent, subnormals and overflow included.
  uint32_t state = 12345;
  for (int i = 0; i < 1000000; ++i) {
    state = state * 1664525u + 1013904223u;
    float x;
    std::memcpy(&x, &state, 4);
    if (std::isnan(x)) continue;
    const float want = static_cast<float>(static_cast<_Float16>(x));
    ASSERT_EQ(round_to_fp16(x), want) << std::hexfloat << x;
  }
#endif
  EXPECT_EQ(fake_quantize(0.05f, 0.1f), 0.0f);        // 0.5 -> 0 (to even)
  EXPECT_FLOAT_EQ(fake_quantize(0.15f, 0.1f), 0.2f);  // 1.5 -> 2
  EXPECT_FLOAT_EQ(fake_quantize(100.0f, 0.1f), 12.7f);  // clamped to 127
  EXPECT_FLOAT_EQ(fake_quantize(-100.0f, 0.1f), -12.7f);
  EXPECT_EQ(fake_quantize(3.0f, 0.0f), 0.0f);
  const std::vector<float> w{0.5f, -1.0f, 0.25f, 0.0f, 0.0f, 0.0f};
  const auto q = quantize_per_channel(w.data(), 2, 3);
  EXPECT_EQ(q[1], -1.0f);  // the row's largest magnitude is exact
  EXPECT_FLOAT_EQ(q[0], std::nearbyint(0.5f * 127.0f) / 127.0f);
  EXPECT_EQ(q[3], 0.0f);   // an all-zero row stays zero
}

std::shared_ptr<formats::Model> dense_model() {
  return ModelBuilder("d", {6}).dense("fc", "x", 6, 3, 21).outputs({"fc"}).build();
}

std::vector<float> run(const std::shared_ptr<formats::Model>& m, engine::Precision p, const std::vector<float>& x,
                       int n) {
  engine::CompileOptions o;
  o.precision = p;
  o.max_batch = n;
  auto exe = engine::BackendRegistry::instance().create("reference")->compile(engine::plan_graph(m), o);
  std::vector<float> y(size_t(n) * 3, NAN);
  float* out = y.data();
  exe->run(x.data(), n, std::span<float* const>(&out, 1));
  return y;
}

TEST(ReducedPrecision, Fp16AndInt8DenseFollowTheirDefinitions) {
  auto m = dense_model();
  const formats::Node& fc = *m->find_node("fc");
  const int n = 4;
  std::vector<float> x(size_t(n) * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.7f) * 2.5f;
  // fp16: input, weights, bias and the output rounded to half; sums exact in double.
  const auto y16 = run(m, engine::Precision::FP16, x, n);
  for (int s = 0; s < n; ++s)
    for (int u = 0; u < 3; ++u) {
      double acc = round_to_fp16(fc.bias->values[size_t(u)]);
      for (int k = 0; k < 6; ++k)
        acc += double(round_to_fp16(x[size_t(s * 6 + k)])) * double(round_to_fp16(fc.weight->values[size_t(u * 6 + k)]));
      EXPECT_EQ(y16[size_t(s * 3 + u)], round_to_fp16(float(acc))) << s << " " << u;
    }
  // int8: the input per tensor with the calibrated range, the weights per output channel.
  formats::Calibration cal;
  cal.method = "max";
  cal.images = 1;
  cal.ranges = {{"x", 2.0}};  // smaller than max |x| = 2.5: some inputs clamp
  m->calibration = cal;
  const auto y8 = run(m, engine::Precision::INT8, x, n);
  const auto wq = quantize_per_channel(fc.weight->values.data(), 3, 6);
  for (int s = 0; s < n; ++s)
    for (int u = 0; u < 3; ++u) {
      double acc = fc.bias->values[size_t(u)];
      for (int k = 0; k < 6; ++k)
        acc += double(fake_quantize(x[size_t(s * 6 + k)], 2.0f / 127.0f)) * double(wq[size_t(u * 6 + k)]);
      EXPECT_EQ(y8[size_t(s * 3 + u)], float(acc)) << s << " " << u;
    }
  // And it differs from fp32 (the emulation is not a no-op).
  const auto y32 = run(m, engine::Precision::FP32, x, n);
  EXPECT_NE(y8, y32);
  EXPECT_NE(y16, y32);
}

TEST(ReducedPrecision, RefusalsNameTheProblem) {
  auto m = dense_model();
  auto reference = engine::BackendRegistry::instance().create("reference");
  engine::CompileOptions o;
  o.precision = engine::Precision::INT8;
  try {
    reference->compile(engine::plan_graph(m), o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model 'd' has no calibration data, which int8 needs"), std::string::npos)
        << e.what();
  }
  formats::Calibration cal;
  cal.method = "max";
  cal.images = 1;
  cal.ranges = {{"fc", 1.0}};  // not the dense node's input
  m->calibration = cal;
  try {
    reference->compile(engine::plan_graph(m), o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("its calibration has no range for 'x', the input of a dense node"),
              std::string::npos)
        << e.what();
  }
  auto cpu = engine::BackendRegistry::instance().create("cpu");
  for (auto p : {engine::Precision::FP16, engine::Precision::BF16}) {  // int8: tests/cpu/int8_test.cpp
    o.precision = p;
    try {
      cpu->compile(engine::plan_graph(m), o);
      FAIL();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("backend 'cpu' does not compute ") + engine::precision_name(p)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace

// A reduced precision as a permission on the custom backend (engine/gpu/precision_choice.hpp, as on
// the cudnn backend): fp16 may run fp32, int8 may run fp16 or fp32, whichever forward pass is the
// fastest at the planned batch. The plan's second line states what was asked, what runs and the
// timings; what runs gives the same bits as that precision compiled as asked (AsAsked runs exactly
// the precision asked), on the chain's family and on the per-node path; fp32 has no choice to make,
// and int8 without calibration is refused before any timing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/custom_backend.hpp"
#include "engine/gpu/precision_choice.hpp"
#include "tests/common/compare.hpp"
#include "tests/gpu/custom_tc_util.hpp"

namespace {

using engine::Precision;

std::unique_ptr<engine::Backend> backend(engine::gpu::PrecisionChoice choice) {
  engine::custom::CustomOptions options;
  options.precision_choice = choice;
  return engine::custom::make_custom_backend(options);
}

// Output 0 of `exe` for n float samples, poisoned before the run.
std::vector<float> run(engine::Executable& exe, const engine::Graph& graph, const std::vector<float>& input, int n) {
  std::vector<float> out(size_t(n) * size_t(graph.output_elements(0)), std::nanf(""));
  std::vector<std::vector<float>> others;
  std::vector<float*> outputs{out.data()};
  for (size_t i = 1; i < graph.outputs.size(); ++i) {
    others.emplace_back(size_t(n) * size_t(graph.output_elements(i)));
    outputs.push_back(others.back().data());
  }
  exe.run(input.data(), n, outputs);
  return out;
}

// The precision the plan's line says runs ("precision: fp16 asked, fp32 runs (...").
std::string runs_at(const std::string& summary, Precision asked) {
  const std::string head = std::string("precision: ") + engine::precision_name(asked) + " asked, ";
  const size_t at = summary.find(head);
  if (at == std::string::npos) return "";
  const size_t from = at + head.size();
  return summary.substr(from, summary.find(" runs", from) - from);
}

// Compiled with the permission: the second line names the precision that runs and every allowed
// precision's time; the outputs are the bits of that precision compiled as asked.
void expect_choice(const std::shared_ptr<formats::Model>& model, Precision asked, int n, uint32_t seed) {
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions o;
  o.precision = asked;
  o.max_batch = n;
  const auto exe = backend(engine::gpu::PrecisionChoice::Fastest)->compile(graph, o);
  const std::string summary = exe->plan_summary();
  const std::string second = summary.substr(summary.find('\n') + 1, summary.find('\n', summary.find('\n') + 1) -
                                                                        summary.find('\n') - 1);
  const std::string taken = runs_at(second, asked);
  ASSERT_FALSE(taken.empty()) << summary;
  const auto chosen = engine::parse_precision(taken);
  ASSERT_TRUE(chosen.has_value()) << summary;
  for (const Precision p : engine::gpu::allowed_precisions(asked))
    EXPECT_NE(second.find(std::string(engine::precision_name(p)) + " "), std::string::npos) << engine::precision_name(p) << ": " << second;
  EXPECT_NE(second.find("at batch " + std::to_string(n) + ":"), std::string::npos) << second;
  const auto input = testing_support::random_floats(size_t(n) * size_t(formats::element_count(model->input.raw_shape)),
                                                    seed, -1.0f, 1.0f);
  const auto got = run(*exe, graph, input, n);
  engine::CompileOptions at = o;
  at.precision = *chosen;
  const auto want = run(*backend(engine::gpu::PrecisionChoice::AsAsked)->compile(graph, at), graph, input, n);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "runs " << taken;
  std::cout << "[ measured ] custom " << model->name << " at batch " << n << ": " << second << "\n";
}

// A model outside the chain's family (9 channels in c1, the family has at most 8): the per-node path.
std::shared_ptr<formats::Model> outside_family() {
  tc_test::Family wide;
  wide.name = "tc_family_c1_9";
  wide.c1 = 9;
  return tc_test::family_model(wide);
}

TEST(CustomPrecisionChoice, Fp16MayRunFp32) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (const int n : {16, 4096}) {
    expect_choice(tc_test::family_model(tc_test::Family{}), Precision::FP16, n, 8000 + uint32_t(n));
    expect_choice(outside_family(), Precision::FP16, n, 8100 + uint32_t(n));
    expect_choice(outside_family(), Precision::BF16, n, 8200 + uint32_t(n));
  }
}

TEST(CustomPrecisionChoice, Int8MayRunFp16OrFp32) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (const int n : {16, 4096}) {
    tc_test::Family f;
    f.conv_pad = true;
    const auto x = testing_support::random_floats(size_t(n) * 784, 8300, -1.0f, 1.0f);
    expect_choice(tc_test::calibrated(tc_test::family_model(f), x.data(), n), Precision::INT8, n, 8400 + uint32_t(n));
    const auto y = testing_support::random_floats(size_t(n) * 32 * 32, 8500, -1.0f, 1.0f);
    expect_choice(tc_test::calibrated(outside_family(), y.data(), n), Precision::INT8, n, 8600 + uint32_t(n));
  }
}

// AsAsked runs the precision asked and states no choice; fp32 has none to make either way.
TEST(CustomPrecisionChoice, AsAskedAndFp32StateNoChoice) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const engine::Graph graph = engine::plan_graph(tc_test::family_model(tc_test::Family{}));
  engine::CompileOptions o;
  o.max_batch = 64;
  o.precision = Precision::FP16;
  const auto fp16 = backend(engine::gpu::PrecisionChoice::AsAsked)->compile(graph, o);
  EXPECT_EQ(fp16->plan_summary().find("precision: "), std::string::npos) << fp16->plan_summary();
  EXPECT_NE(fp16->execution_path().find("tensor-core chain (fp16"), std::string::npos) << fp16->execution_path();
  o.precision = Precision::FP32;
  const auto fp32 = backend(engine::gpu::PrecisionChoice::Fastest)->compile(graph, o);
  EXPECT_EQ(fp32->plan_summary().find("precision: "), std::string::npos) << fp32->plan_summary();
}

TEST(CustomPrecisionChoice, Int8WithoutCalibrationRefused) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  engine::CompileOptions o;
  o.precision = Precision::INT8;
  try {
    backend(engine::gpu::PrecisionChoice::Fastest)->compile(engine::plan_graph(tc_test::family_model(tc_test::Family{})), o);
    ADD_FAILURE() << "compiled without calibration";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has no calibration data, which int8 needs"), std::string::npos) << e.what();
  }
}

}  // namespace

// The cpu backend's dense layers and what feeds them: multi-layer perceptrons of odd sizes (units
// and inputs that fill no whole vector, k past every block size), against the reference and bit
// for bit across batch splits, thread counts and both schedules; the uint8 preprocessing of rows
// without side padding (one run per plane) bitwise the reference's. Outputs start as NaN
// (compare_with_cpu, run_split), so an element never written fails. Each test runs with the kernels
// this CPU picks, with the AVX2 ones where the CPU has them, and with the portable ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"

namespace {

using formats::OpType;

constexpr double kTolerance = 1e-5;  // as fast_backend_test.cpp: fp32 sums of order-1 terms
constexpr double kRelTolerance = 1e-3;

engine::cpu::CpuOptions options_for(const std::string& kernels, engine::cpu::CpuOptions::Schedule schedule) {
  engine::cpu::CpuOptions o;
  if (kernels != "best") o.kernels = *engine::cpu::parse_kernels(kernels);
  o.schedule = schedule;
  return o;
}

// uint8 [1, 5, 27] (rows of 27: no whole vector), padded above and below only, through three dense
// layers of 130, 33 and 10 units (none a multiple of 16) with relu, tanh and softmax.
std::shared_ptr<formats::Model> mlp_model() {
  formats::Preprocess p;
  p.scale = 0.003921568859368563f;
  p.mean = {0.1307f};
  p.std = {0.3081f};
  p.pad_top = 1, p.pad_bottom = 2;
  p.pad_value = 0.25f;
  return testing_support::ModelBuilder("mlp_odd", {1, 8, 27})
      .uint8_input({1, 5, 27}, p)
      .unary("f", OpType::Flatten, "x")
      .dense("d1", "f", 8 * 27, 130, 11)
      .unary("d1r", OpType::Relu, "d1")
      .dense("d2", "d1r", 130, 33, 12)
      .unary("d2t", OpType::Tanh, "d2")
      .dense("d3", "d2t", 33, 10, 13)
      .unary("y", OpType::Softmax, "d3")
      .outputs({"y"})
      .build();
}

// float [1100] (k past two 512-wide chunks, not a multiple of any vector) to 70 units, sigmoid, to
// 19 units; both layers' values are outputs (the second one unfused).
std::shared_ptr<formats::Model> wide_model() {
  return testing_support::ModelBuilder("dense_wide", {1100})
      .dense("d1", "x", 1100, 70, 21)
      .unary("d1s", OpType::Sigmoid, "d1")
      .dense("d2", "d1s", 70, 19, 22, false)
      .outputs({"d2", "d1s"})
      .build();
}

// Every output of `count` samples run in batches of `split` with `threads` threads, outputs NaN
// before every call; concatenated per output.
std::vector<std::vector<float>> run_split(engine::Backend& backend, const std::shared_ptr<formats::Model>& model,
                                          const std::vector<uint8_t>& input, int count, int split, int threads) {
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = split;
  options.threads = threads;
  auto exe = backend.compile(graph, options);
  const size_t sample_bytes = input.size() / size_t(count);
  std::vector<std::vector<float>> all(graph.outputs.size()), buffers(graph.outputs.size());
  std::vector<float*> pointers;
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    buffers[o].resize(size_t(graph.output_elements(o)) * size_t(split));
    pointers.push_back(buffers[o].data());
  }
  for (int start = 0; start < count; start += split) {
    const int n = std::min(split, count - start);
    for (auto& b : buffers) std::fill(b.begin(), b.end(), std::nanf(""));
    exe->run(input.data() + size_t(start) * sample_bytes, n, pointers);
    for (size_t o = 0; o < buffers.size(); ++o)
      all[o].insert(all[o].end(), buffers[o].begin(), buffers[o].begin() + ptrdiff_t(graph.output_elements(o) * n));
  }
  return all;
}

std::vector<uint8_t> input_bytes(const std::shared_ptr<formats::Model>& model, int count, uint32_t seed) {
  const size_t per = size_t(formats::element_count(model->input.raw_shape));
  if (model->input.dtype == formats::InputDType::UInt8) return testing_support::random_bytes(per * size_t(count), seed);
  const auto floats = testing_support::random_floats(per * size_t(count), seed, -1.0f, 1.0f);
  std::vector<uint8_t> bytes(floats.size() * sizeof(float));
  std::memcpy(bytes.data(), floats.data(), bytes.size());
  return bytes;
}

class CpuDense : public ::testing::TestWithParam<const char*> {
 protected:
  // A kernel set this CPU lacks is refused at compile() (cpu_options.hpp): skipped here.
  void SetUp() override {
    kernels_ = GetParam();
    try {
      auto cpu = engine::cpu::make_cpu_backend(options_for(kernels_, engine::cpu::CpuOptions::Schedule::Auto));
      (void)cpu->compile(engine::plan_graph(wide_model()), engine::CompileOptions{});
    } catch (const std::exception& e) {
      GTEST_SKIP() << "the " << kernels_ << " kernels cannot run here: " << e.what();
    }
  }
  std::string kernels_;
};

TEST_P(CpuDense, NetworksMatchTheReference) {
  for (auto schedule : {engine::cpu::CpuOptions::Schedule::Tiles, engine::cpu::CpuOptions::Schedule::Images}) {
    auto cpu = engine::cpu::make_cpu_backend(options_for(kernels_, schedule));
    uint32_t seed = 100;
    for (const auto& model : {mlp_model(), wide_model()})
      for (int batch : {1, 2, 3, 5, 8, 13, 16, 37}) {
        const auto input = input_bytes(model, batch, seed++);
        const auto c = testing_support::compare_with_cpu(model, *cpu, input.data(), batch, batch + 3);
        const std::string what = model->name + " batch " + std::to_string(batch);
        EXPECT_EQ(c.unwritten, 0u) << what;
        EXPECT_LE(c.max_abs_error, kTolerance) << what;
        EXPECT_LE(c.max_rel_error, kRelTolerance) << what << ": " << c.worst;
      }
  }
}

// Each image's outputs have the same bits whether it ran alone (the single-image path and its
// matrix-vector product), in a partial or whole tile, in an image group, on any thread.
TEST_P(CpuDense, SameBitsForAnySplitThreadsAndSchedule) {
  constexpr int kCount = 75;
  for (const auto& model : {mlp_model(), wide_model()}) {
    const auto input = input_bytes(model, kCount, 7);
    auto tiles = engine::cpu::make_cpu_backend(options_for(kernels_, engine::cpu::CpuOptions::Schedule::Tiles));
    const auto base = run_split(*tiles, model, input, kCount, 1, 1);
    for (const auto& out : base)
      for (float v : out) ASSERT_FALSE(std::isnan(v)) << model->name;
    for (auto schedule : {engine::cpu::CpuOptions::Schedule::Tiles, engine::cpu::CpuOptions::Schedule::Images}) {
      auto cpu = engine::cpu::make_cpu_backend(options_for(kernels_, schedule));
      for (int threads : {1, 2, 3})
        for (int split : {1, 7, 16, 75}) {
          const auto got = run_split(*cpu, model, input, kCount, split, threads);
          for (size_t o = 0; o < base.size(); ++o)
            EXPECT_EQ(testing_support::first_bit_difference(base[o], got[o]), base[o].size())
                << model->name << " output " << o << ", batches of " << split << ", " << threads << " threads, "
                << (schedule == engine::cpu::CpuOptions::Schedule::Tiles ? "tiles" : "images");
        }
    }
  }
}

// Rows with no left/right padding are normalised as one run per plane: still bitwise the
// reference's values, for widths below, at and past a vector, with rows padded above and below.
TEST_P(CpuDense, PreprocessingWithoutSidePaddingIsBitwiseTheReferences) {
  auto cpu = engine::cpu::make_cpu_backend(options_for(kernels_, engine::cpu::CpuOptions::Schedule::Auto));
  for (int width : {3, 16, 27, 33}) {
    formats::Preprocess p;
    p.scale = 0.003921568859368563f;
    p.mean = {0.485f, 0.456f};
    p.std = {0.229f, 0.224f};
    p.pad_top = width % 2, p.pad_bottom = 2;
    p.pad_value = -0.5f;
    auto model = testing_support::ModelBuilder("pre_flat", {1})
                     .uint8_input({2, 5, width}, p)
                     .unary("y", OpType::Flatten, "x")
                     .outputs({"y"})
                     .build();
    for (int batch : {1, 3, 17}) {
      const auto pixels = testing_support::random_bytes(size_t(10 * width) * size_t(batch), 900 + uint32_t(batch));
      const auto want = testing_support::run_backend(model, "reference", pixels.data(), batch, batch);
      const auto got = testing_support::run_backend(model, *cpu, pixels.data(), batch, batch);
      ASSERT_EQ(got[0].size(), want[0].size());
      EXPECT_EQ(testing_support::first_bit_difference(want[0], got[0]), want[0].size())
          << "width " << width << " batch " << batch;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuDense, ::testing::Values("best", "avx2", "portable"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace

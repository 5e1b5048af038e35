// A batch whose tensors pass cuDNN's size limit (cudnnSetTensor4dDescriptor refuses 2^31 elements)
// runs in chunks planned at compile time (steps.hpp: kMaxTensorElements, BatchChunks). A wide first
// layer (128 channels of 128 x 128: 2^21 elements a sample) fits 1,023 samples under 2^31 elements;
// a batch of 1,100 runs as 1,023 + 77. Checked: the plan says so, the batch gives exactly
// the bits of its chunks run one by one, and samples on both sides of the chunk boundary match the CPU
// reference at the fp32 reduction bound; every output element written (NaN-poisoned).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/cudnn/cudnn_options.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/cudnn_test_util.hpp"

namespace {

using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;

std::shared_ptr<formats::Model> wide_model() {
  return ModelBuilder("wide_first_layer", {2, 128, 128})
      .conv2d("c", "x", 2, 128, window(3, 3, 1, 1, 1, 1, 1, 1), 6100)
      .unary("r", OpType::Relu, "c")
      .pool("p", OpType::MaxPool, "r", window(8, 8, 8, 8))
      .unary("f", OpType::Flatten, "p")
      .dense("d", "f", 128 * 16 * 16, 10, 6101)
      .outputs({"d"})
      .build();
}

std::vector<float> run(engine::Executable& exe, const float* input, int n, size_t units) {
  std::vector<float> out(units * size_t(n), std::nanf(""));
  float* p = out.data();
  exe.run(input, n, std::span<float* const>(&p, 1));
  return out;
}

TEST(CudnnChunks, BatchPastTheTensorLimitRunsInChunks) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  if (cudnn_test::sanitizer_run()) GTEST_SKIP() << "too large for compute-sanitizer";
  const auto model = wide_model();
  const int n = 1100, chunk = 1023;
  const size_t per_sample = size_t(2) * 128 * 128, units = 10;
  const auto input = testing_support::random_floats(per_sample * size_t(n), 6102);
  engine::CompileOptions options;
  options.max_batch = n;
  auto exe = engine::cudnn::make_cudnn_backend()->compile(engine::plan_graph(model), options);
  const std::string plan = exe->plan_summary();
  EXPECT_NE(plan.find("calls of at most 1023 samples"), std::string::npos) << plan;

  const auto whole = run(*exe, input.data(), n, units);
  const auto head = run(*exe, input.data(), chunk, units);
  const auto tail = run(*exe, input.data() + size_t(chunk) * per_sample, n - chunk, units);
  for (float v : whole) ASSERT_FALSE(std::isnan(v)) << "an output element was not written";
  EXPECT_EQ(std::memcmp(whole.data(), head.data(), head.size() * sizeof(float)), 0) << "first chunk";
  EXPECT_EQ(std::memcmp(whole.data() + head.size(), tail.data(), tail.size() * sizeof(float)), 0) << "last chunk";

  // Against the reference: samples 1,020 .. 1,029 (across the boundary) and the last one.
  for (const int first : {1020, n - 1}) {
    const int count = first == n - 1 ? 1 : 10;
    const auto ref = testing_support::run_backend(model, "reference", input.data() + size_t(first) * per_sample,
                                                  count, count)
                         .at(0);
    double peak = 0;
    for (float v : ref) peak = std::max(peak, double(std::fabs(v)));
    for (size_t i = 0; i < ref.size(); ++i) {
      const double got = whole[size_t(first) * units + i];
      const double scale = std::max(std::fabs(double(ref[i])), 1e-2 * peak);
      EXPECT_LE(std::fabs(got - ref[i]) / scale, cudnn_test::kFp32ReductionTolerance)
          << "sample " << first + int(i / units) << " unit " << i % units << ": " << got << " vs " << ref[i];
    }
  }
}

}  // namespace

// The cudnn backend's dense layers (cuBLASLt, bias and relu in the GEMM's epilogue; cublasGemmEx, the
// CudnnOptions::dense alternative and fallback): MLPs of odd sizes against the CPU reference on both
// paths, the plan naming the fused epilogue, and the determinism the
// backend promises for dense layers: one executable gives a sample the same bits whatever batch it
// is run in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/cudnn/cudnn_options.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/cudnn_test_util.hpp"

namespace {

using cudnn_test::expect_reduction_matches_cpu_all_batches;
using formats::OpType;
using testing_support::ModelBuilder;

// in -> dense h1 -> relu -> dense h2 (bias as given) -> relu -> dense out -> (softmax)
std::shared_ptr<formats::Model> mlp(int in, int h1, int h2, int out, bool bias2, bool softmax, uint32_t seed) {
  ModelBuilder b("mlp", {in});
  b.dense("d1", "x", in, h1, seed).unary("r1", OpType::Relu, "d1");
  b.dense("d2", "r1", h1, h2, seed + 10, bias2).unary("r2", OpType::Relu, "d2");
  b.dense("d3", "r2", h2, out, seed + 20);
  if (softmax) b.unary("p", OpType::Softmax, "d3");
  return b.outputs({softmax ? "p" : "d3"}).build();
}

TEST(CudnnDense, FusedEpiloguesMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  struct Case {
    int in, h1, h2, out;
    bool bias2, softmax;
  };
  const std::vector<Case> cases = {{784, 256, 128, 10, true, true}, {37, 65, 33, 10, false, false},
                                   {1, 3, 1, 2, true, true},        {400, 120, 84, 10, false, true}};
  using Dense = engine::cudnn::CudnnOptions::Dense;
  for (Dense path : {Dense::CublasLt, Dense::Gemm}) {
    engine::cudnn::CudnnOptions options;
    options.dense = path;
    uint32_t seed = 4100;
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(path == Dense::Gemm ? "cublasGemmEx" : "cuBLASLt") + ", mlp " + std::to_string(c.in) +
                   "-" + std::to_string(c.h1) + "-" + std::to_string(c.h2) + "-" + std::to_string(c.out));
      expect_reduction_matches_cpu_all_batches(mlp(c.in, c.h1, c.h2, c.out, c.bias2, c.softmax, seed), seed, options);
      seed += 100;
    }
  }
}

TEST(CudnnDense, PlanNamesTheFusedEpilogue) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  const engine::Graph graph = engine::plan_graph(mlp(50, 30, 20, 10, false, true, 4700));
  engine::CompileOptions options;
  options.max_batch = 64;
  const std::string plan = engine::BackendRegistry::instance().create("cudnn")->compile(graph, options)->plan_summary();
  EXPECT_NE(plan.find("cublasLtMatmul 30x50"), std::string::npos) << plan;
  EXPECT_NE(plan.find("epilogue RELU_BIAS (relu 'r1' fused)"), std::string::npos) << plan;
  EXPECT_NE(plan.find("epilogue RELU (relu 'r2' fused)"), std::string::npos) << plan;
  EXPECT_NE(plan.find("epilogue BIAS,"), std::string::npos) << plan;
  EXPECT_NE(plan.find("split-K "), std::string::npos) << plan;

  engine::cudnn::CudnnOptions gemm;
  gemm.dense = engine::cudnn::CudnnOptions::Dense::Gemm;
  const std::string gemm_plan = engine::cudnn::make_cudnn_backend(gemm)->compile(graph, options)->plan_summary();
  EXPECT_NE(gemm_plan.find("cublasGemmEx 30x50 (CUBLAS_COMPUTE_32F, fp32) + bias via cudnnAddTensor + relu 'r1' in "
                           "place"),
            std::string::npos)
      << gemm_plan;
  EXPECT_EQ(gemm_plan.find("cublasLtMatmul"), std::string::npos) << gemm_plan;
}

// One executable: every split of the same samples into batches gives the same bits, split-K or not
// (784 -> 512 -> 256 at 1,024 is where cuBLASLt ranks split-K algorithms first on an H200).
TEST(CudnnDense, SameBitsForAnyBatchSplit) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  struct Case {
    int max_batch, hidden1, hidden2;
  };
  for (const Case c : {Case{300, 257, 129}, Case{5000, 257, 129}, Case{1024, 512, 256}}) {
    const int max_batch = c.max_batch;
    SCOPED_TRACE("max_batch " + std::to_string(max_batch) + ", 784-" + std::to_string(c.hidden1) + "-" +
                 std::to_string(c.hidden2));
    const auto model = mlp(784, c.hidden1, c.hidden2, 10, true, false, 4800);
    const engine::Graph graph = engine::plan_graph(model);
    engine::CompileOptions options;
    options.max_batch = max_batch;
    auto exe = engine::BackendRegistry::instance().create("cudnn")->compile(graph, options);
    // The promise holds where cuBLASLt runs every layer (its one algorithm for every n).
    EXPECT_EQ(exe->plan_summary().find("cublasGemmEx"), std::string::npos) << exe->plan_summary();
    std::printf("%s\n", exe->plan_summary().c_str());  // which split-K each layer runs, in the log
    const int count = max_batch;
    const auto input = testing_support::random_floats(size_t(784) * size_t(count), 4900, -1.0f, 1.0f);
    auto run_split = [&](int chunk) {
      std::vector<float> all(size_t(10) * size_t(count), std::nanf(""));
      for (int start = 0; start < count; start += chunk) {
        const int n = std::min(chunk, count - start);
        float* out[] = {all.data() + size_t(start) * 10};
        exe->run(input.data() + size_t(start) * 784, n, out);
      }
      return all;
    };
    const auto whole = run_split(count);
    for (int chunk : {1, 7, 64, 255, count - 1}) {
      const auto split = run_split(chunk);
      EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
          << "batches of " << chunk << " differ from one batch of " << count;
    }
  }
}

}  // namespace

// --backend=cudnn, one op (or a small fused pattern) at a time against the CPU reference
// (compare_with_cpu): fresh random inputs, odd sizes, stride 2, asymmetric padding (explicit padding
// path), batch 1, a partial batch (n < max_batch) and large batches; relative error <= 1e-5 and no
// unwritten (NaN) element. Every test needs the backend (a GPU): without one it is reported skipped.
#include <gtest/gtest.h>

#include <iostream>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/cudnn/cudnn_options.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/cudnn_test_util.hpp"

namespace {

using cudnn_test::expect_matches_cpu_all_batches;
using cudnn_test::expect_reduction_matches_cpu_all_batches;
using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::single_op_model;
using testing_support::window;

using gpu_test::conv_attrs;
using gpu_test::dense_attrs;
using gpu_test::pool_attrs;

TEST(CudnnConv2d, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  struct Case {
    formats::Shape input;
    int out_channels;
    formats::Window2D win;
    bool bias = true;
  };
  const std::vector<Case> cases = {
      {{1, 32, 32}, 6, window(5, 5, 1, 1)},                      // LeNet c1
      {{6, 14, 14}, 16, window(5, 5, 1, 1)},                     // LeNet c3
      {{3, 17, 23}, 7, window(3, 3, 2, 2, 1, 2, 0, 1)},          // stride 2, asymmetric padding (explicit)
      {{16, 12, 9}, 16, window(3, 3, 1, 1, 1, 1, 1, 1), false},  // 'same' symmetric padding, no bias
      {{4, 10, 10}, 5, window(2, 2, 1, 1, 0, 1, 0, 1)},          // Keras 'same' with an even kernel
      {{2, 9, 40}, 33, window(2, 7, 3, 1, 1, 0, 3, 2)},          // odd sizes, uneven padding
      {{5, 1, 1}, 70, window(1, 1, 1, 1)},                       // 1x1
      {{3, 31, 29}, 5, window(7, 5, 4, 3, 3, 3, 2, 2)},          // large stride, symmetric padding in cuDNN
  };
  uint32_t seed = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE("conv2d input " + formats::shape_to_string(c.input) + " -> " + std::to_string(c.out_channels));
    auto model = single_op_model(OpType::Conv2D, c.input, conv_attrs(c.out_channels, c.win), seed, c.bias);
    expect_reduction_matches_cpu_all_batches(model, seed);
    seed += 10;
  }
}

// conv → relu is one cudnnConvolutionBiasActivationForward (with bias) or conv + in-place relu (without);
// conv → tanh is not fused; a conv whose value is also an output is not fused.
TEST(CudnnConv2d, FusedActivationMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  auto with_bias = ModelBuilder("conv_relu", {3, 13, 11})
                       .conv2d("c", "x", 3, 8, window(3, 3, 1, 1), 1)
                       .unary("r", OpType::Relu, "c")
                       .outputs({"r"})
                       .build();
  expect_reduction_matches_cpu_all_batches(with_bias, 11);
  auto no_bias = ModelBuilder("conv_relu_nobias", {3, 13, 11})
                     .conv2d("c", "x", 3, 8, window(3, 3, 2, 1, 0, 1, 1, 1), 2, false)
                     .unary("r", OpType::Relu, "c")
                     .outputs({"r"})
                     .build();
  expect_reduction_matches_cpu_all_batches(no_bias, 12);
  auto conv_tanh = ModelBuilder("conv_tanh", {2, 9, 9})
                       .conv2d("c", "x", 2, 4, window(3, 3, 1, 1), 3)
                       .unary("t", OpType::Tanh, "c")
                       .outputs({"t"})
                       .build();
  expect_reduction_matches_cpu_all_batches(conv_tanh, 13);
  auto both_outputs = ModelBuilder("conv_relu_both", {2, 9, 9})
                          .conv2d("c", "x", 2, 4, window(3, 3, 1, 1), 4)
                          .unary("r", OpType::Relu, "c")
                          .outputs({"r", "c"})
                          .build();
  expect_reduction_matches_cpu_all_batches(both_outputs, 14);
  // Two convolutions in a row, each fused with its relu, then flatten → dense.
  auto chain = ModelBuilder("conv_chain", {1, 16, 16})
                   .conv2d("c1", "x", 1, 4, window(3, 3, 1, 1), 5)
                   .unary("r1", OpType::Relu, "c1")
                   .conv2d("c2", "r1", 4, 6, window(3, 3, 2, 2, 1, 1, 1, 1), 6)
                   .unary("r2", OpType::Relu, "c2")
                   .unary("f", OpType::Flatten, "r2")
                   .dense("d", "f", 6 * 7 * 7, 10, 7)
                   .outputs({"d"})
                   .build();
  expect_reduction_matches_cpu_all_batches(chain, 15);
}

// conv2d with few output channels runs as a space-to-depth convolution (conv_s2d.cpp): shapes that
// take that path (odd channel counts, even padding, 1x1 to 7x7 kernels, with and without bias), each
// followed by nothing, or by relu / tanh / sigmoid computed in the depth-to-space pass, or by an
// activation that cannot be fused (the conv's value is also an output); the plan says which ran, and
// CudnnOptions::space_to_depth = Never (the direct convolution) matches the reference too.
TEST(CudnnConv2d, SpaceToDepthMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  struct Case {
    formats::Shape input;
    int out_channels;
    formats::Window2D win;
    bool bias = true;
  };
  const std::vector<Case> cases = {
      {{3, 12, 10}, 5, window(3, 3, 1, 1, 2, 2, 2, 2)},          // padding 2 -> 1 in the folded grid
      {{1, 8, 8}, 1, window(7, 7, 1, 1)},                        // one output channel, 7x7
      {{7, 6, 14}, 16, window(5, 5, 1, 1, 2, 2, 4, 4), false},   // 16 channels (the limit), no bias
      {{2, 4, 4}, 3, window(1, 1, 1, 1)},                        // 1x1: a block-diagonal 1x1 conv
      {{5, 10, 6}, 9, window(3, 5, 1, 1, 0, 0, 2, 2)},           // rectangular kernel
  };
  uint32_t seed = 300;
  // Forced on for every batch case (the default takes the path from 256 images on); then the direct
  // convolution.
  using SpaceToDepth = engine::cudnn::CudnnOptions::SpaceToDepth;
  for (const SpaceToDepth mode : {SpaceToDepth::Always, SpaceToDepth::Never}) {
    engine::cudnn::CudnnOptions cudnn_options;
    cudnn_options.space_to_depth = mode;
    const bool s2d = mode == SpaceToDepth::Always;
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(s2d ? "space-to-depth" : "direct") + " conv2d input " +
                   formats::shape_to_string(c.input) + " -> " + std::to_string(c.out_channels));
      auto model = single_op_model(OpType::Conv2D, c.input, conv_attrs(c.out_channels, c.win), seed, c.bias);
      const std::string plan = engine::cudnn::make_cudnn_backend(cudnn_options)
                                   ->compile(engine::plan_graph(model), engine::CompileOptions{})
                                   ->plan_summary();
      EXPECT_EQ(plan.find("space-to-depth 2x2") != std::string::npos, s2d) << plan;
      expect_reduction_matches_cpu_all_batches(model, seed, cudnn_options);
      for (OpType act : {OpType::Relu, OpType::Tanh, OpType::Sigmoid}) {
        auto fused = ModelBuilder("conv_act", c.input)
                         .conv2d("c", "x", int(c.input[0]), c.out_channels, c.win, seed + 1, c.bias)
                         .unary("a", act, "c")
                         .outputs({"a"})
                         .build();
        expect_reduction_matches_cpu_all_batches(fused, seed + 2, cudnn_options);
      }
      auto both = ModelBuilder("conv_act_both", c.input)
                      .conv2d("c", "x", int(c.input[0]), c.out_channels, c.win, seed + 3, c.bias)
                      .unary("a", OpType::Tanh, "c")
                      .outputs({"a", "c"})
                      .build();
      expect_reduction_matches_cpu_all_batches(both, seed + 4, cudnn_options);
      seed += 10;
    }
  }
  // By default the path is a plan-time choice from the batch the executable is planned for.
  auto model = single_op_model(OpType::Conv2D, {1, 32, 32}, conv_attrs(6, window(5, 5, 1, 1)), 399, true);
  for (int max_batch : {1, 255, 256, 4096}) {
    engine::CompileOptions options;
    options.max_batch = max_batch;
    const std::string plan =
        engine::BackendRegistry::instance().create("cudnn")->compile(engine::plan_graph(model), options)->plan_summary();
    EXPECT_EQ(plan.find("space-to-depth 2x2") != std::string::npos, max_batch >= 256) << max_batch << "\n" << plan;
  }
}

// The space-to-depth path past 65,535 samples (its rearrangements run on chunks of the batch).
TEST(CudnnHugeBatch, SpaceToDepthConvPast65535Samples) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  auto model = ModelBuilder("s2d_huge", {3, 6, 6})
                   .conv2d("c", "x", 3, 4, window(3, 3, 1, 1), 4200)
                   .unary("a", OpType::Tanh, "c")
                   .outputs({"a"})
                   .build();
  uint32_t seed = 4210;
  for (const auto& bc : gpu_test::huge_batch_cases())
    cudnn_test::expect_matches_cpu(model, bc, seed++, -1.0f, 1.0f, {}, cudnn_test::kFp32ReductionTolerance);
}

TEST(CudnnPool, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  struct Case {
    OpType op;
    formats::Shape input;
    formats::Window2D win;
    bool count_include_pad = true;
  };
  const std::vector<Case> cases = {
      {OpType::AvgPool, {6, 28, 28}, window(2, 2, 2, 2)},                        // LeNet s2
      {OpType::MaxPool, {16, 10, 10}, window(2, 2, 2, 2)},                       // LeNet s4 as max
      {OpType::MaxPool, {3, 15, 17}, window(3, 3, 2, 2, 1, 1, 1, 1)},            // symmetric pad in cuDNN
      {OpType::MaxPool, {3, 15, 17}, window(3, 2, 2, 1, 0, 2, 1, 0)},            // asymmetric: -inf border
      {OpType::AvgPool, {4, 11, 13}, window(3, 3, 2, 2, 1, 1, 1, 1), true},      // include pad, symmetric
      {OpType::AvgPool, {4, 11, 13}, window(3, 3, 2, 2, 1, 1, 1, 1), false},     // exclude pad, symmetric
      {OpType::AvgPool, {4, 11, 13}, window(3, 2, 2, 3, 2, 0, 0, 1), true},      // include pad, asymmetric
      {OpType::AvgPool, {2, 7, 5}, window(7, 5, 1, 1)},                          // global window
      {OpType::MaxPool, {1, 9, 9}, window(1, 1, 2, 2)},                          // 1x1 window, stride 2
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(formats::op_name(c.op)) + " input " + formats::shape_to_string(c.input));
    auto model = single_op_model(c.op, c.input, pool_attrs(c.win, c.count_include_pad), seed);
    expect_matches_cpu_all_batches(model, seed);
    seed += 10;
  }
}

// count_include_pad = false with asymmetric padding cannot be done exactly with cuDNN descriptors:
// the backend says so (Backend::unsupported) and compile refuses, naming the node.
TEST(CudnnPool, AsymmetricExcludePadIsUnsupported) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  auto model = single_op_model(OpType::AvgPool, {2, 8, 8}, pool_attrs(window(3, 3, 1, 1, 0, 1, 1, 1), false), 1);
  auto backend = engine::BackendRegistry::instance().create("cudnn");
  const auto why = backend->unsupported(model->nodes.at(0));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("count_include_pad"), std::string::npos) << *why;
  const engine::Graph graph = engine::plan_graph(model);
  try {
    backend->compile(graph, {});
    FAIL() << "compile accepted an unsupported node";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos) << e.what();
  }
  // The symmetric variant is supported.
  auto ok = single_op_model(OpType::AvgPool, {2, 8, 8}, pool_attrs(window(3, 3, 1, 1, 1, 1, 1, 1), false), 1);
  EXPECT_FALSE(backend->unsupported(ok->nodes.at(0)).has_value());
}

TEST(CudnnActivation, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  uint32_t seed = 500;
  for (OpType op : {OpType::Relu, OpType::Tanh, OpType::Sigmoid}) {
    for (const formats::Shape& shape : {formats::Shape{6, 28, 28}, formats::Shape{17}, formats::Shape{3, 5, 7}}) {
      SCOPED_TRACE(std::string(formats::op_name(op)) + " " + formats::shape_to_string(shape));
      auto model = single_op_model(op, shape, formats::Node{}, seed);
      // Wide range: both tails of tanh and sigmoid, and values near 0.
      expect_matches_cpu_all_batches(model, seed, -8.0f, 8.0f);
      seed += 10;
    }
  }
}

TEST(CudnnSoftmax, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  uint32_t seed = 700;
  for (const formats::Shape& shape : {formats::Shape{10}, formats::Shape{1}, formats::Shape{1000}, formats::Shape{37}}) {
    SCOPED_TRACE("softmax " + formats::shape_to_string(shape));
    auto model = single_op_model(OpType::Softmax, shape, formats::Node{}, seed);
    expect_matches_cpu_all_batches(model, seed, -20.0f, 20.0f);
    seed += 10;
  }
}

TEST(CudnnDense, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  struct Case {
    int64_t in;
    int units;
    bool bias = true;
  };
  const std::vector<Case> cases = {{400, 120}, {120, 84}, {84, 10}, {1, 1}, {1000, 37, false}, {33, 257}};
  uint32_t seed = 900;
  for (const auto& c : cases) {
    SCOPED_TRACE("dense " + std::to_string(c.in) + " -> " + std::to_string(c.units));
    auto model = single_op_model(OpType::Dense, {c.in}, dense_attrs(c.units), seed, c.bias);
    expect_reduction_matches_cpu_all_batches(model, seed);
    seed += 10;
  }
}

TEST(CudnnAdd, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  // add(relu(x), tanh(x)): two distinct inputs, a value used twice.
  expect_matches_cpu_all_batches(testing_support::add_dag_model({6, 14, 14}), 1100, -3.0f, 3.0f);
  expect_matches_cpu_all_batches(testing_support::add_dag_model({17}), 1110, -3.0f, 3.0f);
  // add(x, x): the same value as both operands.
  expect_matches_cpu_all_batches(single_op_model(OpType::Add, {5, 3, 9}, formats::Node{}, 1120), 1120);
}

const std::vector<formats::Shape>& scale_concat_shapes() {
  static const std::vector<formats::Shape> shapes = {{3, 8, 8}, {7, 13, 5}, {1000}, {1}, {17, 1, 1}, {2, 19}};
  return shapes;
}

// cudnnOpTensor (x * scale) then cudnnAddTensor (+ shift): two fp32 roundings against the reference's
// one; elementwise, so the 1e-5 bound.
TEST(CudnnScaleShift, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  uint32_t seed = 1400;
  for (const formats::Shape& shape : scale_concat_shapes()) {
    SCOPED_TRACE("scale_shift " + formats::shape_to_string(shape));
    expect_matches_cpu_all_batches(single_op_model(OpType::ScaleShift, shape, formats::Node{}, seed), seed, -3.0f,
                                   3.0f);
    seed += 10;
  }
}

// cudaMemcpy2DAsync into each input's slice: exact copies.
TEST(CudnnConcat, MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  uint32_t seed = 1500;
  for (const formats::Shape& shape : scale_concat_shapes()) {
    SCOPED_TRACE("concat " + formats::shape_to_string(shape));
    expect_matches_cpu_all_batches(testing_support::concat_dag_model(shape), seed, -3.0f, 3.0f);
    expect_matches_cpu_all_batches(single_op_model(OpType::Concat, shape, formats::Node{}, seed + 1), seed + 1);
    seed += 10;
  }
}

// Conv branches joined by concat, pooling, scale_shift on channels and features (conv and dense:
// the reduction bound).
TEST(CudnnScaleShiftConcat, BranchyModelMatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  expect_reduction_matches_cpu_all_batches(testing_support::branchy_model({2, 8, 10}, 1600), 1600);
  expect_reduction_matches_cpu_all_batches(testing_support::branchy_model({1, 6, 6}, 1610), 1610);
}

// Batches past 65,535 samples: cuDNN's pooling refuses them in one call (CUDNN_STATUS_NOT_SUPPORTED
// at N = 65,536), so the backend runs per-sample calls in chunks; every op kind is checked across the
// chunk boundary, full and partial batches.
TEST(CudnnHugeBatch, EveryOpMatchesCpuPast65535Samples) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  uint32_t seed = 4100;
  for (const auto& m : gpu_test::huge_batch_models()) {
    SCOPED_TRACE(m.model->name);
    for (const auto& bc : gpu_test::huge_batch_cases())
      cudnn_test::expect_matches_cpu(m.model, bc, seed++, m.lo, m.hi, {},
                                     m.reduction ? cudnn_test::kFp32ReductionTolerance : cudnn_test::kFp32Tolerance);
  }
}

// The non-default options compile and keep fp32 parity (FP32 precision with measured algorithms).
TEST(CudnnOptions, NondeterministicFp32MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  engine::CompileOptions options;
  options.deterministic = false;
  auto model = single_op_model(OpType::Conv2D, {6, 14, 14}, conv_attrs(16, window(5, 5, 1, 1)), 1200);
  for (const auto& bc : cudnn_test::batch_cases())
    cudnn_test::expect_matches_cpu(model, bc, 1200, -1, 1, options, cudnn_test::kFp32ReductionTolerance);
}

}  // namespace

namespace {

// Precision::TF32 runs (within a loose sanity bound) while FP32 stays at fp32 parity on the same
// shapes; the printed errors show how far apart the two modes are on this GPU (TF32's are of order
// 1e-2 on a dense 400 -> 120, fp32's of order 1e-5); cuDNN's heuristics may keep an FMA kernel for a
// small convolution even when TF32 is allowed.
TEST(CudnnOptions, Tf32RunsAndFp32IsNotTf32) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  engine::CompileOptions tf32;
  tf32.precision = engine::Precision::TF32;
  const std::vector<std::shared_ptr<formats::Model>> models = {
      single_op_model(OpType::Conv2D, {16, 12, 9}, conv_attrs(32, window(3, 3, 1, 1, 1, 1, 1, 1)), 1300),
      single_op_model(OpType::Dense, {400}, dense_attrs(120), 1310),
  };
  const int batch = cudnn_test::sanitizer_run() ? 16 : 256;
  for (const auto& model : models) {
    SCOPED_TRACE(model->name);
    const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
    const auto input = testing_support::random_floats(per_sample * size_t(batch), 1320);
    const auto fp32 = testing_support::compare_with_cpu(model, "cudnn", input.data(), batch, batch);
    const auto t = testing_support::compare_with_cpu(model, "cudnn", input.data(), batch, batch, tf32);
    EXPECT_EQ(t.unwritten, 0u);
    EXPECT_LE(t.max_rel_error, 0.1) << t.worst;
    EXPECT_LE(fp32.max_rel_error, cudnn_test::kFp32ReductionTolerance) << fp32.worst;
    std::cout << "[ cudnn    ] " << model->name << ": max relative error fp32 " << fp32.max_rel_error << ", TF32 "
              << t.max_rel_error << "\n";
  }
}

}  // namespace

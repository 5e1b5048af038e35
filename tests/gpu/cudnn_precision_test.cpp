// The cudnn backend's storage choices (engine/cudnn/descriptors.hpp, Storage): the NHWC layout at
// fp32, which must keep fp32 parity with the CPU reference (it only moves data: filters permuted to
// KRSC, dense weights to a flatten's (h, w, c) order, concat per pixel, space-to-depth on NHWC views),
// and fp16 / bf16 storage against the reference backend's emulation of the same precision (every
// value rounded to the format, sums in double) on fresh random inputs, odd sizes, every op kind;
// LeNet-5 on MNIST against fp32 with the bounds docs/precision.md states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/cudnn_test_util.hpp"
#include "tests/gpu/mnist_model_util.hpp"

namespace {

using formats::OpType;
using gpu_test::conv_attrs;
using gpu_test::dense_attrs;
using gpu_test::pool_attrs;
using testing_support::ModelBuilder;
using testing_support::single_op_model;
using testing_support::window;

// Sets ENGINE_CUDNN_LAYOUT for one scope.
class LayoutOverride {
 public:
  explicit LayoutOverride(const char* layout) { setenv("ENGINE_CUDNN_LAYOUT", layout, 1); }
  ~LayoutOverride() { unsetenv("ENGINE_CUDNN_LAYOUT"); }
  LayoutOverride(const LayoutOverride&) = delete;
  LayoutOverride& operator=(const LayoutOverride&) = delete;
};

struct Case {
  std::shared_ptr<formats::Model> model;
  bool reduction = true;
};

// Every op kind in shapes that exercise the layout: multi-channel spatial values, flatten into dense,
// concat of [C, H, W] values, per-channel scale_shift, asymmetric padding (explicit pad buffers),
// LeNet's c1 and c3 (space-to-depth from 256 images on).
std::vector<Case> cases() {
  std::vector<Case> c;
  uint32_t seed = 5000;
  c.push_back({single_op_model(OpType::Conv2D, {1, 32, 32}, conv_attrs(6, window(5, 5, 1, 1)), seed++)});
  c.push_back({single_op_model(OpType::Conv2D, {6, 14, 14}, conv_attrs(16, window(5, 5, 1, 1)), seed++)});
  c.push_back({single_op_model(OpType::Conv2D, {3, 17, 23}, conv_attrs(7, window(3, 3, 2, 2, 1, 2, 0, 1)), seed++)});
  c.push_back({single_op_model(OpType::Conv2D, {4, 10, 10}, conv_attrs(5, window(2, 2, 1, 1, 0, 1, 0, 1)), seed++)});
  c.push_back({single_op_model(OpType::Conv2D, {3, 12, 10}, conv_attrs(8, window(3, 3, 1, 1, 2, 2, 2, 2)), seed++)});
  c.push_back({single_op_model(OpType::MaxPool, {5, 11, 9}, pool_attrs(window(3, 3, 2, 2, 0, 1, 1, 0)), seed++), false});
  c.push_back({single_op_model(OpType::AvgPool, {6, 28, 28}, pool_attrs(window(2, 2, 2, 2)), seed++), false});
  c.push_back({ModelBuilder("conv_relu_flatten_dense", {3, 9, 7})
                   .conv2d("c", "x", 3, 5, window(3, 3, 1, 1, 1, 1, 1, 1), seed++)
                   .unary("r", OpType::Relu, "c")
                   .unary("f", OpType::Flatten, "r")
                   .dense("d", "f", 5 * 9 * 7, 13, seed++)
                   .unary("s", OpType::Softmax, "d")
                   .outputs({"s", "c"})
                   .build()});
  c.push_back({ModelBuilder("concat_scale_shift_add", {3, 8, 6})
                   .conv2d("a", "x", 3, 4, window(3, 3, 1, 1, 1, 1, 1, 1), seed++)
                   .conv2d("b", "x", 3, 2, window(1, 1, 1, 1), seed++)
                   .concat("cat", {"a", "b", "x"})
                   .scale_shift("ss", "cat", 9, seed++)
                   .unary("t", OpType::Tanh, "ss")
                   .add("sum", "t", "cat")
                   .unary("g", OpType::Sigmoid, "sum")
                   .outputs({"g"})
                   .build()});
  testing_support::LenetLike o;
  o.act3 = OpType::Relu;
  o.act6 = OpType::Sigmoid;
  c.push_back({testing_support::lenet_like_model(o)});
  return c;
}

std::string plan_of(const std::shared_ptr<formats::Model>& model, const engine::CompileOptions& options) {
  auto backend = engine::BackendRegistry::instance().create("cudnn");
  engine::CompileOptions o = options;
  o.max_batch = 300;
  return backend->compile(engine::plan_graph(model), o)->plan_summary();
}

TEST(CudnnLayout, NhwcFp32MatchesCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  LayoutOverride nhwc("nhwc");
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.model->name);
    EXPECT_NE(plan_of(c.model, {}).find("fp32 NHWC storage"), std::string::npos) << plan_of(c.model, {});
    for (const auto& bc : cudnn_test::batch_cases())
      cudnn_test::expect_matches_cpu(c.model, bc, 5100 + uint32_t(bc.batch), -1.0f, 1.0f, {},
                                     c.reduction ? cudnn_test::kFp32ReductionTolerance : cudnn_test::kFp32Tolerance);
  }
}

// A flatten of a [C, H, W] value read by anything but a dense layer keeps the executable NCHW, and
// the plan says why.
TEST(CudnnLayout, FlattenIntoNonDenseKeepsNchw) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  auto model = ModelBuilder("flatten_softmax", {3, 6, 5})
                   .conv2d("c", "x", 3, 4, window(3, 3, 1, 1), 5200)
                   .unary("f", OpType::Flatten, "c")
                   .unary("s", OpType::Softmax, "f")
                   .outputs({"s"})
                   .build();
  engine::CompileOptions fp16;
  fp16.precision = engine::Precision::FP16;
  const std::string plan = plan_of(model, fp16);
  EXPECT_NE(plan.find("fp16 NCHW storage"), std::string::npos) << plan;
  EXPECT_NE(plan.find("storage: NCHW: 'f'"), std::string::npos) << plan;
  for (const auto& bc : cudnn_test::batch_cases()) cudnn_test::expect_matches_cpu(model, bc, 5201, -1, 1, fp16, 1e-2);
}

// fp16 and bf16 against the reference's emulation of the same precision. The two round at nearly the
// same points (cuDNN's fused conv + bias + relu rounds once where the emulation rounds twice), so the
// differences are a few units of the format's last place: bounds of ~20 (fp16, 2^-11) and ~12 (bf16,
// 2^-8) half-ulps of the output's peak.
struct ReducedCase {
  engine::Precision precision;
  double tolerance;
};

TEST(CudnnReducedPrecision, MatchesReferenceEmulation) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  for (const ReducedCase rc : {ReducedCase{engine::Precision::FP16, 1e-2}, ReducedCase{engine::Precision::BF16, 5e-2}}) {
    engine::CompileOptions options;
    options.precision = rc.precision;
    for (const auto& c : cases()) {
      SCOPED_TRACE(std::string(engine::precision_name(rc.precision)) + " " + c.model->name);
      double worst = 0;
      for (const auto& bc : cudnn_test::batch_cases()) {
        const size_t per_sample = size_t(formats::element_count(c.model->input.raw_shape));
        const auto input = testing_support::random_floats(per_sample * size_t(bc.batch), 5300 + uint32_t(bc.batch));
        const auto r = testing_support::compare_with_cpu(c.model, "cudnn", input.data(), bc.batch, bc.max_batch, options);
        EXPECT_EQ(r.unwritten, 0u) << "batch " << bc.batch;
        EXPECT_LE(r.max_rel_error, rc.tolerance) << "batch " << bc.batch << ", worst " << r.worst;
        worst = std::max(worst, r.max_rel_error);
      }
      std::cout << "[ measured ] cudnn " << engine::precision_name(rc.precision) << " " << c.model->name
                << ": max relative error against the emulation " << worst << "\n";
    }
  }
}

// LeNet-5 on MNIST in fp16 and bf16 against fp32 (the reference): the share of images whose class
// changes and max |dp|, with the bounds of docs/precision.md (fp16: >= 99.9 % same class; bf16 on this
// model: the emulation changed 0.01 %); bitwise the same on a second run.
TEST(CudnnReducedPrecision, Lenet5OnMnist) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  const auto& images = gpu_test::mnist_images();
  if (images.count == 0) GTEST_SKIP() << gpu_test::mnist_images_path() << " not found";
  auto model = testing_support::lenet5_model();
  if (!model) GTEST_SKIP() << "models/lenet5.json not found";
  const size_t classes = size_t(engine::plan_graph(model).output_elements(0));
  const auto ref = gpu_test::run_all("reference", model, images, 1024);
  for (const auto& [p, max_dp] : {std::pair{engine::Precision::FP16, 1e-2}, std::pair{engine::Precision::BF16, 5e-2}}) {
    SCOPED_TRACE(engine::precision_name(p));
    engine::CompileOptions options;
    options.precision = p;
    std::string summary;
    const auto got = gpu_test::run_all("cudnn", model, images, 1024, options, &summary);
    const auto again = gpu_test::run_all("cudnn", model, images, 1024, options);
    const auto a = gpu_test::agreement(got, ref, classes);
    EXPECT_EQ(a.nan, 0u);
    EXPECT_GE(double(a.argmax_same), 0.999 * double(a.samples));
    EXPECT_LE(a.max_abs, max_dp);
    EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "not bitwise repeatable";
    EXPECT_NE(summary.find(std::string(engine::precision_name(p)) + " NHWC storage"), std::string::npos) << summary;
    std::cout << "[ measured ] cudnn " << engine::precision_name(p) << " lenet5: same class " << a.argmax_same
              << " of " << a.samples << ", max |dp| " << a.max_abs << "\n"
              << summary;
  }
}

// int8 stays refused with one line.
TEST(CudnnReducedPrecision, Int8IsRefused) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  auto backend = engine::BackendRegistry::instance().create("cudnn");
  EXPECT_FALSE(backend->supports(engine::Precision::INT8));
  EXPECT_TRUE(backend->supports(engine::Precision::FP16));
  EXPECT_TRUE(backend->supports(engine::Precision::BF16));
}

}  // namespace

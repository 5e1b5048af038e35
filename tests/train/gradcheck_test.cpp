// The reference backend's backward pass against central finite differences, in float64: for every
// op of format v1 on odd shapes (strides, asymmetric padding, windows that overhang), a small
// model puts the op between a parameterised layer and the loss, so both the op's input gradient
// (it reaches the layer before) and any parameter gradient of its own are checked. The trainer is
// the double instantiation of engine/train/host_trainer.hpp, exactly what --backend reference runs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/train/host_trainer.hpp"
#include "tests/common/model_builder.hpp"

namespace {

using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;
using Trainer = engine::train::HostTrainer<double>;

struct Batch {
  std::vector<float> x;
  std::vector<uint8_t> labels;
};

Batch random_batch(const formats::Model& model, int n, int classes, uint32_t seed) {
  Batch b;
  b.x = testing_support::random_floats(size_t(formats::element_count(model.input.raw_shape)) * size_t(n), seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) b.labels.push_back(uint8_t(rng() % uint32_t(classes)));
  return b;
}

// Every parameter's gradient (of the mean loss over n samples) against (L(p + h) - L(p - h)) / 2h.
void expect_gradients_match(const std::shared_ptr<formats::Model>& model, int n = 3, double h = 1e-6) {
  const engine::Graph graph = engine::plan_graph(model);
  engine::TrainOptions options;
  options.max_batch = n;
  options.threads = 2;
  Trainer trainer(graph, options, "reference");
  const int classes = int(graph.output_elements(0));
  const Batch b = random_batch(*model, n, classes, 7);
  trainer.compute_gradients(b.x.data(), b.labels.data(), n);
  const int64_t count = trainer.parameter_count();
  const std::vector<double> analytic(trainer.gradient_data(), trainer.gradient_data() + count);
  double largest = 0;
  for (double g : analytic) largest = std::max(largest, std::abs(g));
  ASSERT_GT(largest, 1e-6) << "all gradients vanish: the check would prove nothing";
  double* p = trainer.parameter_data();
  for (int64_t i = 0; i < count; ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    const double up = trainer.evaluate(b.x.data(), b.labels.data(), n).loss_sum / n;
    p[i] = saved - h;
    const double down = trainer.evaluate(b.x.data(), b.labels.data(), n).loss_sum / n;
    p[i] = saved;
    const double numeric = (up - down) / (2 * h);
    ASSERT_NEAR(analytic[size_t(i)], numeric, 1e-7 + 1e-6 * std::abs(numeric))
        << model->name << ": parameter " << i << " of " << count;
  }
}

TEST(GradCheck, Conv2dStridedAsymmetricPaddingTanh) {
  expect_gradients_match(ModelBuilder("conv", {2, 7, 6})
                             .conv2d("c", "x", 2, 3, window(3, 2, 2, 1, 1, 2, 0, 1), 1)
                             .unary("t", OpType::Tanh, "c")
                             .unary("f", OpType::Flatten, "t")
                             .dense("d", "f", 3 * 4 * 6, 5, 3)
                             .unary("p", OpType::Softmax, "d")
                             .outputs({"p"})
                             .build());
}

TEST(GradCheck, Conv2dNoBiasStride3Sigmoid) {
  expect_gradients_match(ModelBuilder("conv_nobias", {3, 5, 8})
                             .conv2d("c", "x", 3, 2, window(2, 3, 2, 3, 0, 1, 1, 0), 1, false)
                             .unary("s", OpType::Sigmoid, "c")
                             .unary("f", OpType::Flatten, "s")
                             .dense("d", "f", 2 * 3 * 3, 4, 3, false)
                             .unary("p", OpType::Softmax, "d")
                             .outputs({"p"})
                             .build());
}

TEST(GradCheck, AvgPoolCountIncludePad) {
  for (bool cip : {true, false}) {
    expect_gradients_match(ModelBuilder(cip ? "avg_cip" : "avg_nocip", {1, 7, 7})
                               .conv2d("c", "x", 1, 2, window(2, 2, 1, 1), 1)
                               .pool("a", OpType::AvgPool, "c", window(3, 3, 2, 2, 1, 1, 1, 1), cip)
                               .unary("f", OpType::Flatten, "a")
                               .dense("d", "f", 2 * 3 * 3, 3, 3)
                               .unary("p", OpType::Softmax, "d")
                               .outputs({"p"})
                               .build());
  }
}

TEST(GradCheck, MaxPoolOverlappingPaddedRelu) {
  expect_gradients_match(ModelBuilder("max", {2, 6, 5})
                             .conv2d("c", "x", 2, 3, window(2, 2, 1, 1), 1)
                             .pool("m", OpType::MaxPool, "c", window(3, 2, 2, 1, 1, 0, 1, 1))
                             .unary("r", OpType::Relu, "m")
                             .unary("f", OpType::Flatten, "r")
                             .dense("d", "f", 3 * 2 * 5, 4, 3)
                             .unary("p", OpType::Softmax, "d")
                             .outputs({"p"})
                             .build());
}

TEST(GradCheck, DenseReluChain) {
  expect_gradients_match(ModelBuilder("mlp", {9})
                             .dense("a", "x", 9, 7, 1)
                             .unary("r", OpType::Relu, "a")
                             .dense("b", "r", 7, 4, 3)
                             .unary("p", OpType::Softmax, "b")
                             .outputs({"p"})
                             .build());
}

TEST(GradCheck, InnerSoftmaxAndScaleShift) {
  expect_gradients_match(ModelBuilder("softmax_inner", {6})
                             .dense("a", "x", 6, 5, 1)
                             .unary("s", OpType::Softmax, "a")
                             .scale_shift("ss", "s", 5, 9)
                             .dense("b", "ss", 5, 3, 3)
                             .unary("p", OpType::Softmax, "b")
                             .outputs({"p"})
                             .build());
}

TEST(GradCheck, ScaleShiftOnChannels) {
  expect_gradients_match(ModelBuilder("scale_shift_chw", {3, 4, 5})
                             .scale_shift("ss", "x", 3, 9)
                             .conv2d("c", "ss", 3, 2, window(3, 3, 1, 1, 1, 1, 1, 1), 1)
                             .unary("f", OpType::Flatten, "c")
                             .dense("d", "f", 2 * 4 * 5, 3, 3)
                             .unary("p", OpType::Softmax, "d")
                             .outputs({"p"})
                             .build());
}

// A value read by several nodes, add of one value with itself, a concat repeating an input: the
// gradients of every consumer are summed.
TEST(GradCheck, AddAndConcatDag) {
  expect_gradients_match(ModelBuilder("dag", {2, 5, 5})
                             .conv2d("a", "x", 2, 3, window(3, 3, 1, 1, 1, 1, 1, 1), 1)
                             .conv2d("b", "x", 2, 3, window(2, 2, 1, 1, 1, 0, 1, 0), 3)
                             .add("s", "a", "b")
                             .unary("t", OpType::Tanh, "s")
                             .add("tt", "t", "t")
                             .concat("cat", {"tt", "a", "tt"})
                             .unary("f", OpType::Flatten, "cat")
                             .dense("d", "f", 9 * 25, 4, 5)
                             .unary("p", OpType::Softmax, "d")
                             .outputs({"p"})
                             .build());
}

// The tie rule: the whole gradient of a window goes to its first maximum in row-major order.
TEST(MaxPoolBackward, FirstMaximumTakesTheGradient) {
  const double x[4] = {1.0, 3.0, 3.0, 3.0};  // a 2x2 window whose maximum appears three times
  const double dy[1] = {5.0};
  double dx[4] = {0, 0, 0, 0};
  const formats::Window2D win{2, 2, 2, 2, 0, 0, 0, 0};
  engine::train::maxpool_backward(x, dy, engine::train::Dims{1, 2, 2}, win, engine::train::Dims{1, 1, 1}, dx);
  EXPECT_EQ(dx[0], 0.0);
  EXPECT_EQ(dx[1], 5.0);
  EXPECT_EQ(dx[2], 0.0);
  EXPECT_EQ(dx[3], 0.0);
}

// The fused loss: its value is -log softmax(z)[label], and dz = (p - onehot) / n.
TEST(SoftmaxCrossEntropy, ValueAndGradient) {
  const double z[3] = {1.0, -2.0, 0.5};
  double p[3], dz[3];
  const double loss = engine::train::softmax_cross_entropy(z, 3, 2, 0.5, p, dz);
  const double s = std::exp(1.0) + std::exp(-2.0) + std::exp(0.5);
  EXPECT_NEAR(loss, -std::log(std::exp(0.5) / s), 1e-15);
  EXPECT_NEAR(dz[0], 0.5 * std::exp(1.0) / s, 1e-15);
  EXPECT_NEAR(dz[2], 0.5 * (std::exp(0.5) / s - 1.0), 1e-15);
}

}  // namespace

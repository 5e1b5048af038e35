// Both GPU backends' training (engine/gpu/train/ with each backend's steps), one parameterised
// suite: per-op gradients against the reference trainer (float64, the oracle) on small graphs of odd
// shapes, with every device buffer poisoned (NaN) first; 50-step runs against the cpu trainer
// (float32) with SGD (momentum, weight decay, lr decay) and Adam; bitwise repeats (run after run,
// graph replay against plain launches, device input against host input); refusals before anything
// changes. What only one trainer has is checked through its case's hooks: the custom trainer's
// activations folded into conv2d/dense change no bit; the cudnn trainer repeats its gradients
// bitwise and captures its library calls into CUDA graphs. cuDNN's and cuBLAS's sums run in their
// own orders, so the cudnn trainer matches the others to a tolerance, never bitwise, but itself
// bitwise. Every comparison prints what it measured ([ measured ] lines), so one run on the GPU
// gives docs/design/training.md's numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/custom/train/gpu_trainer.hpp"
#include "engine/gpu/buffers.hpp"
#include "engine/gpu/train/device_trainer.hpp"
#include "engine/train/host_trainer.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace {

using engine::OptimizerKind;
using engine::gpu::train::DeviceTrainer;
using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;

// Tolerances (docs/design/training.md, "GPU: tolerances"). Gradients: per parameter tensor, the largest
// difference from the float64 reference over the tensor's largest magnitude. Loss curves: relative
// difference from the cpu trainer per step, tight for the first steps, looser once float32 rounding
// differences have been amplified by training.
constexpr double kGradientTolerance = 1e-4;
constexpr double kLossTolerance = 1e-4;        // steps 0..9
constexpr double kLateLossTolerance = 2e-3;    // steps 10..49

struct Batch {
  std::vector<uint8_t> raw;  // n samples in the model's input dtype
  std::vector<uint8_t> labels;
};

Batch random_batch(const formats::Model& model, int n, int classes, uint32_t seed) {
  Batch b;
  const size_t elements = size_t(formats::element_count(model.input.raw_shape)) * size_t(n);
  if (model.input.dtype == formats::InputDType::UInt8) {
    b.raw = testing_support::random_bytes(elements, seed);
  } else {
    const auto f = testing_support::random_floats(elements, seed);
    b.raw.resize(f.size() * sizeof(float));
    std::memcpy(b.raw.data(), f.data(), b.raw.size());
  }
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) b.labels.push_back(uint8_t(rng() % uint32_t(classes)));
  return b;
}

struct RunResult {
  std::vector<double> losses;
  std::vector<int64_t> correct;
  std::vector<float> params;
};

// One GPU trainer under test, and the checks only it has.
struct TrainerCase {
  std::string backend;
  // After the gradients of one batch (loss checked, gradients not yet read).
  std::function<void(const engine::Graph&, const engine::TrainOptions&, const Batch&, int n, DeviceTrainer& gpu,
                     const engine::BatchResult& got, const std::string& what)>
      gradients;
  // After 20 steps (`a`, from `first`) matched a second run and plain launches.
  std::function<void(const engine::Graph&, const engine::TrainOptions&, const formats::Model&, DeviceTrainer& first,
                     const RunResult& a)>
      determinism;
  // More graphs the backend refuses (after the ones every trainer refuses).
  std::function<void(engine::Backend&)> refusals;
};

const TrainerCase& trainer_case(const std::string& backend);

std::unique_ptr<DeviceTrainer> gpu_trainer(const std::string& backend, const engine::Graph& graph,
                                           const engine::TrainOptions& options) {
  auto t = engine::BackendRegistry::instance().create(backend)->compile_training(graph, options);
  auto* g = dynamic_cast<DeviceTrainer*>(t.get());
  if (!g) return nullptr;
  t.release();
  return std::unique_ptr<DeviceTrainer>(g);
}

// ---- gradients of one batch against the float64 reference ------------------------------------------

void expect_gradients_match_reference(const std::string& backend, const std::shared_ptr<formats::Model>& model, int n,
                                      const std::string& what) {
  const engine::Graph graph = engine::plan_graph(model);
  engine::TrainOptions options;
  options.max_batch = n + 3;  // a partial batch: buffers larger than the batch
  options.threads = 2;
  engine::train::HostTrainer<double> reference(graph, options, "reference");
  auto gpu = gpu_trainer(backend, graph, options);
  ASSERT_TRUE(gpu);
  const int classes = int(graph.value(graph.nodes[size_t(graph.value(graph.outputs[0]).producer)].inputs[0]).elements);
  const Batch b = random_batch(*model, n, classes, 17);
  const engine::BatchResult want = reference.compute_gradients(b.raw.data(), b.labels.data(), n);
  gpu->poison_buffers();
  const engine::BatchResult got = gpu->compute_gradients(b.raw.data(), b.labels.data(), n);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::abs(want.loss_sum)) << what;
  if (const auto& extra = trainer_case(backend).gradients) extra(graph, options, b, n, *gpu, got, what);
  EXPECT_EQ(got.correct, want.correct) << what;
  std::vector<float> g(size_t(gpu->parameter_count()));
  gpu->read_gradients(g);
  const double* r = reference.gradient_data();
  for (const engine::ParameterInfo& p : gpu->parameters()) {
    double largest = 0, diff = 0;
    bool finite = true;
    for (int64_t i = p.offset; i < p.offset + p.elements; ++i) {
      largest = std::max(largest, std::abs(r[i]));
      finite = finite && std::isfinite(g[size_t(i)]);
      diff = std::max(diff, std::abs(double(g[size_t(i)]) - r[i]));
    }
    ASSERT_TRUE(finite) << what << ": " << p.name << " has a non-finite gradient (a poisoned buffer was read)";
    ASSERT_GT(largest, 1e-7) << what << ": " << p.name << "'s gradient vanishes; the check would prove nothing";
    const double rel = diff / largest;
    std::printf("[ measured ] gradient %s %s %s: max |gpu - ref| / max |ref| = %.3g\n", backend.c_str(), what.c_str(),
                p.name.c_str(), rel);
    EXPECT_LE(rel, kGradientTolerance) << what << ": " << p.name;
  }
}

formats::Preprocess mnist_like_preprocess() {
  formats::Preprocess p;
  p.scale = 1.0f / 255.0f;
  p.mean = {0.1307f};
  p.std = {0.3081f};
  p.pad_top = 1, p.pad_bottom = 2, p.pad_left = 2, p.pad_right = 0;
  return p;
}

std::shared_ptr<formats::Model> mlp_model() {
  return ModelBuilder("mlp", {1})
      .uint8_input({1, 28, 28}, mnist_like_preprocess())
      .unary("f", OpType::Flatten, "x")
      .dense("d1", "f", 31 * 30, 64, 31)
      .unary("r", OpType::Relu, "d1")
      .dense("d2", "r", 64, 10, 33)
      .unary("p", OpType::Softmax, "d2")
      .outputs({"p"})
      .build();
}

// `steps` steps of batch 32 (every fifth step a partial batch of 29) over fixed random data.
RunResult run_steps(engine::TrainExecutable& t, const formats::Model& model, int steps) {
  RunResult r;
  const Batch data = random_batch(model, 32 * steps, 10, 99);
  const size_t sample_bytes = data.raw.size() / data.labels.size();
  for (int i = 0; i < steps; ++i) {
    const int n = i % 5 == 4 ? 29 : 32;
    const auto b = t.step(data.raw.data() + size_t(i) * 32 * sample_bytes, data.labels.data() + size_t(i) * 32, n);
    r.losses.push_back(b.loss_sum / n);
    r.correct.push_back(b.correct);
  }
  r.params.resize(size_t(t.parameter_count()));
  t.read_parameters(r.params);
  return r;
}

engine::TrainOptions options_for(OptimizerKind kind) {
  engine::TrainOptions o;
  o.max_batch = 32;
  o.threads = 2;
  o.optimizer.kind = kind;
  if (kind == OptimizerKind::SGD) {
    o.optimizer.lr = 0.05;
    o.optimizer.momentum = 0.9;
    o.optimizer.weight_decay = 1e-3;
    o.optimizer.lr_decay = 0.01;
  } else {
    o.optimizer.lr = 1e-3;
    o.optimizer.weight_decay = 1e-4;
  }
  return o;
}

void expect_run_matches_cpu(const std::string& backend, const std::shared_ptr<formats::Model>& model, OptimizerKind kind,
                            const std::string& what) {
  const engine::Graph graph = engine::plan_graph(model);
  const engine::TrainOptions options = options_for(kind);
  auto cpu = engine::BackendRegistry::instance().create("cpu")->compile_training(graph, options);
  auto gpu = gpu_trainer(backend, graph, options);
  ASSERT_TRUE(gpu);
  constexpr int kSteps = 50;
  const RunResult want = run_steps(*cpu, *model, kSteps);
  const RunResult got = run_steps(*gpu, *model, kSteps);
  EXPECT_EQ(gpu->steps_taken(), kSteps);
  double early = 0, late = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double rel = std::abs(got.losses[size_t(i)] - want.losses[size_t(i)]) / std::abs(want.losses[size_t(i)]);
    (i < 10 ? early : late) = std::max(i < 10 ? early : late, rel);
    EXPECT_LE(rel, i < 10 ? kLossTolerance : kLateLossTolerance) << what << ": step " << i << " loss "
                                                                 << got.losses[size_t(i)] << " vs cpu "
                                                                 << want.losses[size_t(i)];
  }
  double pdiff = 0, plargest = 0;
  for (size_t i = 0; i < got.params.size(); ++i) {
    pdiff = std::max(pdiff, std::abs(double(got.params[i]) - double(want.params[i])));
    plargest = std::max(plargest, std::abs(double(want.params[i])));
  }
  std::printf("[ measured ] run %s %s: loss rel. diff steps 0-9 %.3g, steps 10-49 %.3g; final params max diff %.3g "
              "(largest %.3g); loss %.5f -> %.5f\n",
              backend.c_str(), what.c_str(), early, late, pdiff, plargest, got.losses.front(), got.losses.back());
  // (The labels are random and every step sees new samples: the loss need not go down.)
  for (double l : got.losses) ASSERT_TRUE(std::isfinite(l)) << what;
}

// ---- what only one trainer has ------------------------------------------------------------------

const TrainerCase& trainer_case(const std::string& backend) {
  using engine::custom::train::GpuTrainer;
  static const TrainerCase custom{
      "custom",
      // Folding activations into conv2d/dense kernels changes no bit.
      [](const engine::Graph& graph, const engine::TrainOptions& options, const Batch& b, int n, DeviceTrainer& gpu,
         const engine::BatchResult& got, const std::string& what) {
        GpuTrainer unfolded(graph, options, /*fold_activations=*/false);
        unfolded.poison_buffers();
        const engine::BatchResult u = unfolded.compute_gradients(b.raw.data(), b.labels.data(), n);
        EXPECT_EQ(u.loss_sum, got.loss_sum) << what << ": folded vs unfolded";
        std::vector<float> gf(size_t(gpu.parameter_count())), gu(gf.size());
        gpu.read_gradients(gf);
        unfolded.read_gradients(gu);
        EXPECT_EQ(gf, gu) << what << ": folded vs unfolded gradients";
      },
      [](const engine::Graph& graph, const engine::TrainOptions& options, const formats::Model& model, DeviceTrainer&,
         const RunResult& a) {
        GpuTrainer unfolded(graph, options, /*fold_activations=*/false);
        const RunResult d = run_steps(unfolded, model, 20);
        EXPECT_EQ(a.params, d.params) << "activations folded into conv2d/dense vs their own kernels";
        EXPECT_EQ(a.losses, d.losses) << "activations folded into conv2d/dense vs their own kernels";
      },
      nullptr};
  static const TrainerCase cudnn{
      "cudnn",
      [](const engine::Graph&, const engine::TrainOptions&, const Batch& b, int n, DeviceTrainer& gpu,
         const engine::BatchResult& got, const std::string& what) {
        // Plan summary once per model: the algorithms cuDNN's ranking gave (docs/design/training.md).
        std::printf("[ measured ] plan %s: %s\n", what.c_str(), gpu.plan_summary().c_str());
        // The same batch again: bitwise the same gradients (deterministic algorithms, no atomics).
        std::vector<float> g1(size_t(gpu.parameter_count())), g2(g1.size());
        gpu.read_gradients(g1);
        gpu.poison_buffers();
        const engine::BatchResult again = gpu.compute_gradients(b.raw.data(), b.labels.data(), n);
        gpu.read_gradients(g2);
        EXPECT_EQ(again.loss_sum, got.loss_sum) << what << ": repeat";
        EXPECT_EQ(g1, g2) << what << ": repeated gradients differ";
      },
      // The library calls were captured into CUDA graphs (a failed capture falls back to plain launches).
      [](const engine::Graph&, const engine::TrainOptions&, const formats::Model&, DeviceTrainer& first,
         const RunResult&) { EXPECT_TRUE(first.graphs_on()) << first.plan_summary(); },
      [](engine::Backend& backend) {
    // What cuDNN's pooling descriptor cannot express, as for inference: refused before planning.
    engine::TrainOptions o;
    o.max_batch = 4;
    auto asym = ModelBuilder("asym_avg", {1, 6, 6})
                    .pool("a", OpType::AvgPool, "x", window(2, 2, 2, 2, 1, 0, 1, 0), /*count_include_pad=*/false)
                    .unary("f", OpType::Flatten, "a")
                    .dense("d", "f", 3 * 3, 3, 1)
                    .unary("p", OpType::Softmax, "d")
                    .outputs({"p"})
                    .build();
    const engine::Graph asym_graph = engine::plan_graph(asym);  // a valid model: only cudnn refuses it
    EXPECT_TRUE(backend.unsupported(*asym_graph.nodes[0].node).has_value());
    EXPECT_THROW(backend.compile_training(asym_graph, o), std::runtime_error);
      }};
  return backend == "cudnn" ? cudnn : custom;
}

// ---- the suite, over both GPU trainers ----------------------------------------------------------

class GpuTrainTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ENGINE_SKIP_UNLESS_BACKEND(GetParam()); }
  const std::string& backend() const { return GetParam(); }
};
class GpuTrainGradients : public GpuTrainTest {};
class GpuTrainRun : public GpuTrainTest {};
class GpuTrainDeterminism : public GpuTrainTest {};
class GpuTrainInterface : public GpuTrainTest {};

TEST_P(GpuTrainGradients, ConvStridePaddingMaxPoolReluDense) {
  auto model = ModelBuilder("conv_max", {3, 13, 11})
                   .conv2d("c", "x", 3, 5, window(3, 4, 2, 1, 1, 2, 2, 0), 3)  // stride 2x1, asymmetric padding
                   .pool("m", OpType::MaxPool, "c", window(3, 2, 2, 2, 1, 1, 0, 1))  // overlapping, padded
                   .unary("r", OpType::Relu, "m")
                   .unary("f", OpType::Flatten, "r")
                   .dense("d", "f", 5 * 4 * 5, 7, 5)
                   .unary("p", OpType::Softmax, "d")
                   .outputs({"p"})
                   .build();
  expect_gradients_match_reference(backend(), model, 9, "conv+maxpool+relu+dense");
}

TEST_P(GpuTrainGradients, TanhAvgPoolExcludingPadSigmoidTwoDense) {
  auto model = ModelBuilder("conv_avg", {2, 9, 10})
                   .conv2d("c", "x", 2, 4, window(3, 3, 1, 1, 1, 1, 1, 1), 7)
                   .unary("t", OpType::Tanh, "c")
                   .pool("a", OpType::AvgPool, "t", window(3, 3, 2, 2, 1, 1, 1, 1), /*count_include_pad=*/false)
                   .unary("s", OpType::Sigmoid, "a")
                   .unary("f", OpType::Flatten, "s")
                   .dense("d1", "f", 4 * 5 * 5, 13, 9)
                   .unary("t2", OpType::Tanh, "d1")
                   .dense("d2", "t2", 13, 6, 11)
                   .unary("p", OpType::Softmax, "d2")
                   .outputs({"p"})
                   .build();
  expect_gradients_match_reference(backend(), model, 11, "conv+tanh+avgpool+sigmoid+dense");
}

TEST_P(GpuTrainGradients, AddConcatScaleShiftAndAValueReadTwice) {
  auto model = ModelBuilder("branches", {2, 7, 7})
                   .conv2d("a", "x", 2, 3, window(3, 3, 1, 1, 1, 1, 1, 1), 13)
                   .conv2d("b", "x", 2, 3, window(3, 3, 1, 1, 1, 1, 1, 1), 15, /*with_bias=*/false)
                   .add("sum", "a", "b")
                   .add("twice", "sum", "sum")
                   .scale_shift("ss", "twice", 3, 17)
                   .unary("r", OpType::Relu, "ss")
                   .concat("cat", {"r", "a"})
                   .unary("f", OpType::Flatten, "cat")
                   .dense("d", "f", 6 * 7 * 7, 5, 19)
                   .unary("p", OpType::Softmax, "d")
                   .outputs({"p"})
                   .build();
  expect_gradients_match_reference(backend(), model, 5, "add+concat+scale_shift");
}

TEST_P(GpuTrainGradients, SoftmaxInsideTheGraph) {
  auto model = ModelBuilder("inner_softmax", {17})
                   .dense("d1", "x", 17, 9, 21)
                   .unary("s", OpType::Softmax, "d1")
                   .dense("d2", "s", 9, 4, 23)
                   .unary("p", OpType::Softmax, "d2")
                   .outputs({"p"})
                   .build();
  expect_gradients_match_reference(backend(), model, 33, "dense+softmax+dense");
}

TEST_P(GpuTrainGradients, LenetLikeUint8InputAtBatch256) {
  testing_support::LenetLike o;
  o.s4_window = window(3, 3, 2, 2, 1, 1, 1, 1);
  expect_gradients_match_reference(backend(), testing_support::lenet_like_model(o), 256, "lenet_like");
}

TEST_P(GpuTrainRun, LenetLikeSgdMomentumWeightDecayLrDecayFollowsCpu) {
  expect_run_matches_cpu(backend(), testing_support::lenet_like_model({}), OptimizerKind::SGD, "lenet_like sgd");
}

TEST_P(GpuTrainRun, LenetLikeAdamFollowsCpu) {
  expect_run_matches_cpu(backend(), testing_support::lenet_like_model({}), OptimizerKind::Adam, "lenet_like adam");
}

TEST_P(GpuTrainRun, MlpSgdFollowsCpu) {
  expect_run_matches_cpu(backend(), mlp_model(), OptimizerKind::SGD, "mlp sgd");
}

TEST_P(GpuTrainRun, MlpAdamFollowsCpu) {
  expect_run_matches_cpu(backend(), mlp_model(), OptimizerKind::Adam, "mlp adam");
}

// ---- determinism -----------------------------------------------------------------------------------

TEST_P(GpuTrainDeterminism, BitwiseRepeatGraphReplayAndDeviceInput) {
  const auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  for (OptimizerKind kind : {OptimizerKind::SGD, OptimizerKind::Adam}) {
    const engine::TrainOptions options = options_for(kind);
    auto first = gpu_trainer(backend(), graph, options);
    auto second = gpu_trainer(backend(), graph, options);
    auto plain = gpu_trainer(backend(), graph, options);
    ASSERT_TRUE(first && second && plain);
    plain->use_graphs(false);
    const RunResult a = run_steps(*first, *model, 20);
    const RunResult b = run_steps(*second, *model, 20);
    const RunResult c = run_steps(*plain, *model, 20);
    EXPECT_EQ(a.params, b.params) << "run after run";
    EXPECT_EQ(a.losses, b.losses) << "run after run";
    EXPECT_EQ(a.params, c.params) << "graph replay vs plain launches";
    EXPECT_EQ(a.losses, c.losses) << "graph replay vs plain launches";
    if (const auto& extra = trainer_case(backend()).determinism) extra(graph, options, *model, *first, a);

    // The same 20 steps with the data already on the device.
    auto device = gpu_trainer(backend(), graph, options);
    const Batch data = random_batch(*model, 32 * 20, 10, 99);
    engine::gpu::DeviceBuffer<uint8_t> d_raw(data.raw.size(), "test input"), d_labels(data.labels.size(), "test labels");
    ASSERT_EQ(cudaMemcpy(d_raw.data(), data.raw.data(), data.raw.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_labels.data(), data.labels.data(), data.labels.size(), cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<double> losses;
    for (int i = 0; i < 20; ++i) {
      const int n = i % 5 == 4 ? 29 : 32;
      losses.push_back(device->step_device(d_raw.data() + size_t(i) * 32 * 784, d_labels.data() + size_t(i) * 32, n)
                           .loss_sum / n);
    }
    std::vector<float> p(size_t(device->parameter_count()));
    device->read_parameters(p);
    EXPECT_EQ(a.params, p) << "device input vs host input";
    EXPECT_EQ(a.losses, losses) << "device input vs host input";
  }
}

// ---- refusals and the rest of the interface -------------------------------------------------------

TEST_P(GpuTrainInterface, BadLabelsAndBatchesAreRefusedBeforeAnythingChanges) {
  const auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  auto gpu = gpu_trainer(backend(), graph, options_for(OptimizerKind::Adam));
  ASSERT_TRUE(gpu);
  std::vector<float> before(size_t(gpu->parameter_count())), after(before.size());
  gpu->read_parameters(before);
  Batch b = random_batch(*model, 8, 10, 5);
  b.labels[6] = 10;
  EXPECT_THROW(gpu->step(b.raw.data(), b.labels.data(), 8), std::invalid_argument);
  EXPECT_THROW(gpu->evaluate(b.raw.data(), b.labels.data(), 8), std::invalid_argument);
  EXPECT_THROW(gpu->step(b.raw.data(), b.labels.data(), 0), std::invalid_argument);
  EXPECT_THROW(gpu->step(b.raw.data(), b.labels.data(), 33), std::invalid_argument);
  gpu->read_parameters(after);
  EXPECT_EQ(before, after);
  EXPECT_EQ(gpu->steps_taken(), 0);

  // evaluate changes nothing and agrees with the step that follows on the loss it starts from.
  b.labels[6] = 3;
  const auto e1 = gpu->evaluate(b.raw.data(), b.labels.data(), 8);
  const auto e2 = gpu->evaluate(b.raw.data(), b.labels.data(), 8);
  EXPECT_EQ(e1.loss_sum, e2.loss_sum);
  gpu->read_parameters(after);
  EXPECT_EQ(before, after);
  const auto s = gpu->step(b.raw.data(), b.labels.data(), 8);
  EXPECT_EQ(s.loss_sum, e1.loss_sum);
  EXPECT_EQ(s.correct, e1.correct);
  EXPECT_EQ(gpu->steps_taken(), 1);
  gpu->read_parameters(after);
  EXPECT_NE(before, after);

  // write_parameters replaces them (and keeps the step count).
  gpu->write_parameters(before);
  gpu->read_parameters(after);
  EXPECT_EQ(before, after);
  EXPECT_EQ(gpu->steps_taken(), 1);
  std::vector<float> wrong(before.size() + 1);
  EXPECT_THROW(gpu->read_parameters(wrong), std::invalid_argument);
}

TEST_P(GpuTrainInterface, UntrainableGraphsAreRefusedAsByTheHostTrainers) {
  auto no_softmax = ModelBuilder("no_softmax", {5}).dense("d", "x", 5, 3, 1).outputs({"d"}).build();
  auto trainer_backend = engine::BackendRegistry::instance().create(backend());
  engine::TrainOptions o;
  EXPECT_THROW(trainer_backend->compile_training(engine::plan_graph(no_softmax), o), std::invalid_argument);
  o.max_batch = 0;
  EXPECT_THROW(trainer_backend->compile_training(engine::plan_graph(testing_support::lenet_like_model({})), o),
               std::invalid_argument);
  if (const auto& extra = trainer_case(backend()).refusals) extra(*trainer_backend);
}

std::string backend_name(const testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(CustomTrain, GpuTrainGradients, testing::Values("custom"), backend_name);
INSTANTIATE_TEST_SUITE_P(CustomTrain, GpuTrainRun, testing::Values("custom"), backend_name);
INSTANTIATE_TEST_SUITE_P(CustomTrain, GpuTrainDeterminism, testing::Values("custom"), backend_name);
INSTANTIATE_TEST_SUITE_P(CustomTrain, GpuTrainInterface, testing::Values("custom"), backend_name);
INSTANTIATE_TEST_SUITE_P(CudnnTrain, GpuTrainGradients, testing::Values("cudnn"), backend_name);
INSTANTIATE_TEST_SUITE_P(CudnnTrain, GpuTrainRun, testing::Values("cudnn"), backend_name);
INSTANTIATE_TEST_SUITE_P(CudnnTrain, GpuTrainDeterminism, testing::Values("cudnn"), backend_name);
INSTANTIATE_TEST_SUITE_P(CudnnTrain, GpuTrainInterface, testing::Values("cudnn"), backend_name);

// ---- the cudnn trainer alone ------------------------------------------------------------------------

// relu before a padded, overlapping maxpool: windows of zeros tie. The host sends a tie's gradient
// to the first maximum; cuDNN documents no rule. Through the relu (gradient 0 at a zero) the
// parameters' gradients do not depend on which tied element receives it, so the bound holds as is.
TEST(CudnnTrainGradients, ReluBeforePaddedMaxPoolTiesAndAsymmetricAvgPool) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  auto model = ModelBuilder("ties", {2, 12, 11})
                   .conv2d("c", "x", 2, 4, window(3, 3, 1, 1, 1, 1, 1, 1), 41)
                   .unary("r", OpType::Relu, "c")
                   .pool("m", OpType::MaxPool, "r", window(3, 3, 2, 2, 1, 1, 1, 1))  // overlapping, padded
                   .pool("a", OpType::AvgPool, "m", window(2, 2, 1, 1, 0, 1, 1, 0))  // asymmetric, counts pad
                   .unary("f", OpType::Flatten, "a")
                   .dense("d", "f", 4 * 6 * 6, 6, 43)
                   .unary("p", OpType::Softmax, "d")
                   .outputs({"p"})
                   .build();
  expect_gradients_match_reference("cudnn", model, 13, "relu+maxpool ties+asymmetric avgpool");
}

}  // namespace

// Data-parallel training (engine/gpu/train/data_parallel.hpp) on both GPU backends. On one GPU:
// the shard pieces (shard_gradients, apply_update) against the plain step: a shard of the whole
// batch steps bitwise as step() does, and two half-batch shards summed give the whole batch's
// gradient. On two or more GPUs: `TrainOptions::devices = {0, 1}` against one GPU over 20 steps of a
// LeNet-shaped model (the loss and the parameters within float32 rounding of the split sums),
// bitwise repeatable, batches smaller than the device count, bad labels refused before any replica
// starts (none may be left waiting in the all-reduce).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/gpu/train/data_parallel.hpp"
#include "engine/gpu/train/device_trainer.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/gpu_op_test_util.hpp"

namespace {

using engine::gpu::train::DeviceTrainer;
using gpu_test::visible_gpus;

struct Data {
  std::vector<uint8_t> raw, labels;
};

Data random_data(const formats::Model& model, int n, uint32_t seed) {
  Data d;
  d.raw = testing_support::random_bytes(size_t(formats::element_count(model.input.raw_shape)) * size_t(n), seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) d.labels.push_back(uint8_t(rng() % 10u));
  return d;
}

std::unique_ptr<engine::TrainExecutable> trainer(const std::string& backend, const engine::Graph& graph,
                                                 const engine::TrainOptions& options) {
  return engine::BackendRegistry::instance().create(backend)->compile_training(graph, options);
}

DeviceTrainer* as_device(engine::TrainExecutable* t) { return dynamic_cast<DeviceTrainer*>(t); }

engine::TrainOptions options_for(int batch) {
  engine::TrainOptions o;
  o.max_batch = batch;
  o.optimizer.kind = engine::OptimizerKind::Adam;
  o.optimizer.lr = 1e-3;
  return o;
}

class DataParallelTrain : public ::testing::TestWithParam<std::string> {};

// One GPU: shard_gradients(all n of n) + apply_update is step(); two halves summed are the batch.
TEST_P(DataParallelTrain, ShardPiecesMatchThePlainStep) {
  ENGINE_SKIP_UNLESS_BACKEND(GetParam());
  const auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  const int n = 64;
  const Data data = random_data(*model, n, 7);
  auto a = trainer(GetParam(), graph, options_for(n));
  auto b = trainer(GetParam(), graph, options_for(n));
  ASSERT_TRUE(as_device(a.get()) && as_device(b.get()));
  std::vector<float> p(size_t(a->parameter_count()));
  a->read_parameters(p);
  b->write_parameters(p);
  for (int s = 0; s < 3; ++s) {
    const engine::BatchResult ra = a->step(data.raw.data(), data.labels.data(), n);
    const engine::BatchResult rb = as_device(b.get())->shard_gradients(data.raw.data(), data.labels.data(), n, n);
    as_device(b.get())->apply_update();
    EXPECT_EQ(ra.loss_sum, rb.loss_sum) << "step " << s;
  }
  std::vector<float> pa(p.size()), pb(p.size());
  a->read_parameters(pa);
  b->read_parameters(pb);
  EXPECT_EQ(pa, pb) << "shard_gradients + apply_update is not step()";
  EXPECT_EQ(a->steps_taken(), b->steps_taken());

  // Two halves of a batch, each divided by the whole batch's n, sum to the batch's gradient.
  auto* whole = as_device(a.get());
  auto* half = as_device(b.get());
  whole->compute_gradients(data.raw.data(), data.labels.data(), n);
  std::vector<float> g(p.size()), g1(p.size()), g2(p.size());
  whole->read_gradients(g);
  const size_t sample = whole->input_sample_bytes();
  half->shard_gradients(data.raw.data(), data.labels.data(), n / 2, n);
  half->read_gradients(g1);
  half->shard_gradients(data.raw.data() + sample * size_t(n / 2), data.labels.data() + n / 2, n - n / 2, n);
  half->read_gradients(g2);
  double largest = 0, diff = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    largest = std::max(largest, double(std::abs(g[i])));
    diff = std::max(diff, std::abs(double(g1[i]) + double(g2[i]) - double(g[i])));
  }
  std::printf("[ measured ] %s: two shards' gradients summed vs the whole batch: max |diff| / max |g| = %.3g\n",
              GetParam().c_str(), diff / largest);
  EXPECT_LE(diff / largest, 1e-5);
}

// Two GPUs against one: 20 Adam steps of 64 (32 a GPU).
TEST_P(DataParallelTrain, TwoGpusFollowOneAndRepeatBitwise) {
  ENGINE_SKIP_UNLESS_BACKEND(GetParam());
  if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs; " << visible_gpus() << " visible here";
  ASSERT_TRUE(engine::gpu::train::have_nccl()) << "this build has no NCCL";
  const auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  const int n = 64, steps = 20;
  const Data data = random_data(*model, n * steps, 11);
  engine::TrainOptions two = options_for(n);
  two.devices = {0, 1};
  auto one = trainer(GetParam(), graph, options_for(n));
  auto dp = trainer(GetParam(), graph, two);
  auto dp2 = trainer(GetParam(), graph, two);
  EXPECT_NE(dp->plan_summary().find("data parallel on 2 GPUs"), std::string::npos) << dp->plan_summary();
  std::vector<float> p(size_t(one->parameter_count()));
  one->read_parameters(p);
  dp->write_parameters(p);
  dp2->write_parameters(p);
  const size_t sample = size_t(formats::element_count(model->input.raw_shape));
  double worst_loss = 0;
  for (int s = 0; s < steps; ++s) {
    const uint8_t* x = data.raw.data() + size_t(s) * size_t(n) * sample;
    const uint8_t* y = data.labels.data() + size_t(s) * size_t(n);
    const auto r1 = one->step(x, y, n);
    const auto r2 = dp->step(x, y, n);
    const auto r3 = dp2->step(x, y, n);
    EXPECT_EQ(r2.loss_sum, r3.loss_sum) << "step " << s << ": data parallel is not repeatable";
    worst_loss = std::max(worst_loss, std::abs(r2.loss_sum - r1.loss_sum) / std::abs(r1.loss_sum));
  }
  std::vector<float> p1(p.size()), p2(p.size()), p3(p.size());
  one->read_parameters(p1);
  dp->read_parameters(p2);
  dp2->read_parameters(p3);
  EXPECT_EQ(p2, p3) << "two data-parallel runs differ";
  double largest = 0, diff = 0;
  for (size_t i = 0; i < p1.size(); ++i) {
    largest = std::max(largest, double(std::abs(p1[i])));
    diff = std::max(diff, std::abs(double(p1[i]) - double(p2[i])));
  }
  std::printf("[ measured ] %s, 2 GPUs vs 1, %d Adam steps: loss rel. diff %.3g, parameters max diff %.3g (largest %.3g)\n",
              GetParam().c_str(), steps, worst_loss, diff, largest);
  // The loss follows to float rounding; parameters less tightly: Adam divides each update by the
  // gradient's running RMS, so a component whose gradient is near zero moves by up to lr a step
  // whatever the last bits of its sum (and cuDNN's backward algorithms differ between the batch of
  // 64 and the shards of 32).
  EXPECT_LE(worst_loss, 1e-4);
  EXPECT_LE(diff, 1e-3 * largest);
  EXPECT_EQ(dp->steps_taken(), steps);

  // A batch of one sample on two GPUs: the second contributes zeros and still steps.
  const auto r = dp->step(data.raw.data(), data.labels.data(), 1);
  EXPECT_TRUE(std::isfinite(r.loss_sum));
  // A bad label is refused before any replica starts; the trainer keeps working.
  std::vector<uint8_t> bad(data.labels.begin(), data.labels.begin() + n);
  bad[size_t(n - 1)] = 200;
  EXPECT_THROW(dp->step(data.raw.data(), bad.data(), n), std::invalid_argument);
  EXPECT_NO_THROW(dp->step(data.raw.data(), data.labels.data(), n));
}

INSTANTIATE_TEST_SUITE_P(Gpu, DataParallelTrain, ::testing::Values(std::string("custom"), std::string("cudnn")),
                         [](const auto& info) { return info.param; });

}  // namespace

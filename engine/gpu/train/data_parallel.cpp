#include "engine/gpu/train/data_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "engine/core/multi_device.hpp"
#include "engine/gpu/cuda_check.hpp"
#include "engine/gpu/device.hpp"

#if ENGINE_HAVE_NCCL
#include <nccl.h>
#endif

namespace engine::gpu::train {

bool have_nccl() { return ENGINE_HAVE_NCCL != 0; }

#if ENGINE_HAVE_NCCL
namespace {

void nccl_check(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) throw std::runtime_error(fmt::format("NCCL: {}: {}", what, ncclGetErrorString(r)));
}

class DataParallelTrainer final : public TrainExecutable {
 public:
  DataParallelTrainer(std::vector<std::unique_ptr<DeviceTrainer>> replicas, std::vector<int> devices)
      : replicas_(std::move(replicas)), devices_(std::move(devices)), workers_(int(replicas_.size())) {
    parameters_ = replicas_[0]->parameters();
    comms_.resize(replicas_.size(), nullptr);
    // Ring: the one algorithm whose summation order is set by the ring alone (see the header).
    setenv("NCCL_ALGO", "Ring", 0);
    nccl_check(ncclCommInitAll(comms_.data(), int(comms_.size()), devices_.data()), "ncclCommInitAll");
    // Every replica starts from replica 0's parameters (the same initialisation anyway; this makes it so).
    std::vector<float> p(static_cast<size_t>(parameter_count()));
    replicas_[0]->read_parameters(p);
    for (size_t i = 1; i < replicas_.size(); ++i) replicas_[i]->write_parameters(p);
    std::string on;
    for (int d : devices_) on += (on.empty() ? "" : ", ") + std::to_string(d);
    results_.resize(replicas_.size());
    summary_ = fmt::format("data parallel on {} GPUs ({}): each batch split into contiguous shards, gradients summed "
                           "by NCCL {} (ring all-reduce), the same optimiser step on every replica\n{}",
                           replicas_.size(), on, nccl_version(), replicas_[0]->plan_summary());
  }
  ~DataParallelTrainer() override {
    for (ncclComm_t c : comms_)
      if (c) ncclCommDestroy(c);
  }

  int max_batch() const override { return replicas_[0]->max_batch() * int(replicas_.size()); }
  int64_t steps_taken() const override { return replicas_[0]->steps_taken(); }
  std::string plan_summary() const override { return summary_; }

  BatchResult step(const void* input, const uint8_t* labels, int n) override {
    const int parts = int(replicas_.size());
    if (n < 1 || n > max_batch())
      throw std::invalid_argument(fmt::format("batch of {} samples outside 1..{}", n, max_batch()));
    if (!input || !labels) throw std::invalid_argument("no input or no labels");
    // Every check before any replica starts: one that threw half-way would leave the others waiting
    // in the all-reduce.
    replicas_[0]->check_labels(labels, n);
    const size_t sample_bytes = input_sample_bytes();
    const int64_t count = parameter_count();
    auto work = [&](int d) {
      const int first = int(int64_t(d) * n / parts), last = int(int64_t(d + 1) * n / parts);
      DeviceTrainer& r = *replicas_[size_t(d)];
      if (last > first) {
        results_[size_t(d)] = r.shard_gradients(static_cast<const uint8_t*>(input) + size_t(first) * sample_bytes,
                                                labels + first, last - first, n);
      } else {
        results_[size_t(d)] = BatchResult{};
        r.zero_gradients();  // fewer samples than GPUs: this replica adds nothing but still steps
      }
      {
        gpu::DeviceGuard guard(r.device());
        nccl_check(ncclAllReduce(r.gradient_data(), r.gradient_data(), size_t(count), ncclFloat, ncclSum,
                                 comms_[size_t(d)], r.stream()),
                   "gradient all-reduce");
      }
      r.apply_update();  // waits for the all-reduce on the replica's stream, then updates
    };
    workers_.run(work);
    BatchResult total;
    for (const auto& r : results_) {
      total.loss_sum += r.loss_sum;
      total.correct += r.correct;
    }
    return total;
  }

  // Every replica holds the same parameters: the first evaluates.
  BatchResult evaluate(const void* input, const uint8_t* labels, int n) override {
    BatchResult total;
    const int m = replicas_[0]->max_batch();
    for (int first = 0; first < n; first += m) {
      const int k = std::min(m, n - first);
      const BatchResult r =
          replicas_[0]->evaluate(static_cast<const uint8_t*>(input) + size_t(first) * input_sample_bytes(), labels + first, k);
      total.loss_sum += r.loss_sum;
      total.correct += r.correct;
    }
    return total;
  }
  void read_parameters(std::span<float> out) const override { replicas_[0]->read_parameters(out); }
  void write_parameters(std::span<const float> in) override {
    for (auto& r : replicas_) r->write_parameters(in);
  }
  // Every replica takes the same optimiser step, so replica 0's state is every replica's.
  OptimizerState read_optimizer_state() const override { return replicas_[0]->read_optimizer_state(); }
  void write_optimizer_state(const OptimizerState& state) override {
    for (auto& r : replicas_) r->write_optimizer_state(state);
  }

 private:
  size_t input_sample_bytes() const { return replicas_[0]->input_sample_bytes(); }

  static std::string nccl_version() {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "(unknown version)";
    return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
  }

  std::vector<std::unique_ptr<DeviceTrainer>> replicas_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<BatchResult> results_;  // per replica, the last step's (no allocation per step)
  WorkerGroup workers_;
  std::string summary_;
};

}  // namespace
#endif

std::unique_ptr<TrainExecutable> compile_on_devices(
    const TrainOptions& options, const std::function<std::unique_ptr<DeviceTrainer>(const TrainOptions&)>& make) {
  if (options.devices.empty()) return make(options);
  if (options.devices.size() == 1) {
    gpu::DeviceGuard guard(options.devices[0]);
    return make(options);
  }
#if ENGINE_HAVE_NCCL
  // Each replica is planned for its share of the largest batch (rounded up).
  TrainOptions part = options;
  const int parts = int(options.devices.size());
  part.max_batch = (options.max_batch + parts - 1) / parts;
  part.devices.clear();
  std::vector<std::unique_ptr<DeviceTrainer>> replicas;
  for (int d : options.devices) {
    gpu::DeviceGuard guard(d);
    replicas.push_back(make(part));
  }
  return std::make_unique<DataParallelTrainer>(std::move(replicas), options.devices);
#else
  throw std::invalid_argument(fmt::format(
      "training on {} GPUs needs NCCL, and this build has none (CMake did not find nccl.h and libnccl with the CUDA "
      "installation; set NCCL_ROOT)",
      options.devices.size()));
#endif
}

}  // namespace engine::gpu::train

#include "engine/gpu/device_executable.hpp"

#include <stdexcept>

namespace engine::gpu {
namespace {

// A time point made by a bound executable: its CUDA event belongs to the executable's device.
class BoundTimePoint final : public TimePoint {
 public:
  BoundTimePoint(int device, std::unique_ptr<TimePoint> inner) : device_(device), inner_(std::move(inner)) {}
  ~BoundTimePoint() override {
    try {
      DeviceGuard g(device_);
      inner_.reset();
    } catch (...) {
      // Could not switch device (a dead context): the event is leaked rather than destroyed on
      // the wrong device.
      (void)inner_.release();
    }
  }
  void record() override {
    DeviceGuard g(device_);
    inner_->record();
  }
  double ms_since(const TimePoint& start) override {
    DeviceGuard g(device_);
    return inner_->ms_since(*dynamic_cast<const BoundTimePoint&>(start).inner_);
  }

 private:
  int device_;
  std::unique_ptr<TimePoint> inner_;
};

class BoundExecutable final : public Executable, public StagedExecution {
 public:
  BoundExecutable(int device, std::unique_ptr<Executable> inner, std::string plan_note)
      : device_(device), inner_(std::move(inner)), plan_note_(std::move(plan_note)) {
    if (!inner_) throw std::invalid_argument("bind_to_device: no executable");
    inner_staged_ = inner_->staged_execution();
  }
  ~BoundExecutable() override {
    try {
      DeviceGuard g(device_);
      inner_.reset();
    } catch (...) {
      (void)inner_.release();  // as BoundTimePoint: better leaked than freed on another device
    }
  }

  int max_batch() const override { return inner_->max_batch(); }
  void run(const void* input, int n, std::span<float* const> outputs) override {
    DeviceGuard g(device_);
    inner_->run(input, n, outputs);
  }
  void run_batches(const BatchStream& s) override {
    DeviceGuard g(device_);
    inner_->run_batches(s);
  }
  bool overlaps_batches() const override { return inner_->overlaps_batches(); }
  std::optional<RunTimings> last_timings() const override { return inner_->last_timings(); }
  std::string plan_summary() const override {
    std::string summary = inner_->plan_summary();
    if (plan_note_.empty()) return summary;
    const size_t line_end = summary.find('\n');
    return line_end == std::string::npos ? summary + "\n" + plan_note_
                                         : summary.insert(line_end + 1, plan_note_ + "\n");
  }
  std::string execution_path() const override { return inner_->execution_path(); }
  bool pin_host_input(const void* data, size_t bytes) override {
    DeviceGuard g(device_);
    return inner_->pin_host_input(data, bytes);
  }
  bool accepts_device_input() const override { return inner_->accepts_device_input(); }
  void run_device_input(const void* device_input, int n, std::span<float* const> outputs) override {
    DeviceGuard g(device_);
    inner_->run_device_input(device_input, n, outputs);
  }
  // Staged execution where the bound executable has it, each call with the device current.
  StagedExecution* staged_execution() override { return inner_staged_ ? this : nullptr; }
  void* input_staging() override { return inner_staged_->input_staging(); }
  void stage_input(const void* input, int n) override {
    DeviceGuard g(device_);
    inner_staged_->stage_input(input, n);
  }
  void compute(int n) override {
    DeviceGuard g(device_);
    inner_staged_->compute(n);
  }
  void fetch_outputs(int n) override {
    DeviceGuard g(device_);
    inner_staged_->fetch_outputs(n);
  }
  const float* staged_output(size_t i) const override { return inner_staged_->staged_output(i); }
  void synchronize() override {
    DeviceGuard g(device_);
    inner_staged_->synchronize();
  }
  std::unique_ptr<TimePoint> make_time_point() override {
    DeviceGuard g(device_);
    return std::make_unique<BoundTimePoint>(device_, inner_staged_->make_time_point());
  }
  std::optional<std::string> use_graph_replay(bool on) override {
    DeviceGuard g(device_);
    return inner_->use_graph_replay(on);
  }

 private:
  int device_;
  std::unique_ptr<Executable> inner_;
  std::string plan_note_;
  StagedExecution* inner_staged_ = nullptr;
};

}  // namespace

std::unique_ptr<Executable> bind_to_device(int device, std::unique_ptr<Executable> exe, std::string plan_note) {
  return std::make_unique<BoundExecutable>(device, std::move(exe), std::move(plan_note));
}

}  // namespace engine::gpu

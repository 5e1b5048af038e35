#pragma once
// Staged execution: an executable's run taken apart into its scopes so that a benchmark (engine
// bench) can time them one by one. Executable::run is stage_input, compute, fetch_outputs,
// synchronize, then a copy out of staged_output(). On a GPU each call only enqueues work on the
// executable's stream and synchronize() waits for it; on the CPU every call is synchronous.
// Nothing on the run path (engine run, api::Session) uses it: an executable offers it through
// Executable::staged_execution().
#include <chrono>
#include <cstddef>
#include <memory>

namespace engine {

// A point on an executable's timeline. record() marks the moment the work enqueued so far is done:
// a CUDA event on a GPU executable's stream, a steady-clock reading where calls are synchronous.
class TimePoint {
 public:
  virtual ~TimePoint() = default;
  virtual void record() = 0;
  // Milliseconds from `start` (made by the same executable) to this point; waits for both.
  virtual double ms_since(const TimePoint& start) = 0;
};

class SteadyTimePoint final : public TimePoint {
 public:
  void record() override { at_ = std::chrono::steady_clock::now(); }
  double ms_since(const TimePoint& start) override {
    const auto& s = dynamic_cast<const SteadyTimePoint&>(start);
    return std::chrono::duration<double, std::milli>(at_ - s.at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_{};
};

class StagedExecution {
 public:
  virtual ~StagedExecution() = default;
  // Host memory for max_batch() raw samples that stage_input reads fastest (pinned on GPU
  // backends), or nullptr when any host memory does as well.
  virtual void* input_staging() { return nullptr; }
  // n raw samples become the input of the next compute(n) (GPU: host to device, then the
  // preprocessing kernel). `input` must stay valid until compute(n) has run.
  virtual void stage_input(const void* input, int n) = 0;
  // Every node on the staged input: the "compute only" scope of engine bench.
  virtual void compute(int n) = 0;
  // Outputs of the last compute(n) to host memory, readable through staged_output(i) (n *
  // graph.output_elements(i) floats) once synchronize() has returned.
  virtual void fetch_outputs(int n) = 0;
  virtual const float* staged_output(size_t i) const = 0;
  virtual void synchronize() {}
  virtual std::unique_ptr<TimePoint> make_time_point() { return std::make_unique<SteadyTimePoint>(); }
};

}  // namespace engine

#pragma once
// What both GPU backends share at run time: the device activation arena laid out by the planner,
// pinned staging for inputs and outputs, one stream, events for timing, upload + preprocessing on
// the device. A backend derives from it and implements forward(): the nodes, on the stream, with
// the preprocessed input already in the arena.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "engine/core/backend.hpp"
#include "engine/gpu/buffers.hpp"
#include "engine/gpu/preprocess.hpp"

namespace engine::gpu {

class GpuExecutable : public Executable, public StagedExecution {
 public:
  GpuExecutable(const Graph& graph, const CompileOptions& options);
  ~GpuExecutable() override;

  int max_batch() const override { return max_batch_; }
  void run(const void* input, int n, std::span<float* const> outputs) override;
  // Uploads on a second stream into two raw-input slots taken in turn: batch k + 1's upload runs
  // while batch k is preprocessed and computed (uint8 models; float models run the plain loop).
  void run_batches(const BatchStream& s) override;
  bool overlaps_batches() const override { return graph_.model->input.dtype == formats::InputDType::UInt8; }
  std::optional<RunTimings> last_timings() const override { return timings_; }

  // Pieces of run() for benchmarks that time scopes separately (all asynchronous on stream()).
  void upload_async(const void* host_input, int n);  // host → pinned → device, then preprocess
  virtual void forward(int n) = 0;                   // every node; input value already in place
  void download_async(int n);                        // outputs → pinned staging
  void synchronize() override;
  const float* staged_output(size_t i) const override;  // pinned host copy after download + sync

  // Staged execution (engine bench): the pieces above, CUDA events for time points, and
  // forward(n) captured once per n into a CUDA graph and replayed when use_graph_replay(true).
  StagedExecution* staged_execution() override { return this; }
  void* input_staging() override { return pinned_input_.data(); }
  void stage_input(const void* input, int n) override { upload_async(input, n); }
  void compute(int n) override;
  void fetch_outputs(int n) override { download_async(n); }
  std::unique_ptr<TimePoint> make_time_point() override;
  std::optional<std::string> use_graph_replay(bool on) override;
  bool pin_host_input(const void* data, size_t bytes) override;
  bool accepts_device_input() const override { return true; }
  void run_device_input(const void* device_input, int n, std::span<float* const> outputs) override;

  cudaStream_t stream() const { return stream_.get(); }
  const Graph& graph() const { return graph_; }
  // Device pointer of a value's [max_batch, elements] block in the arena.
  float* device_value(int value_id) const;

 protected:
  Graph graph_;
  CompileOptions options_;
  int max_batch_;

 private:
  void check_outputs(std::span<float* const> outputs) const;
  // After the input is in place: compute, download, wait, copy the outputs out, keep the timings.
  void finish_run(int n, std::span<float* const> outputs);

  Stream stream_;
  DeviceBuffer<float> arena_;
  DeviceBuffer<uint8_t> raw_input_;  // uint8 models: pixels as uploaded
  DeviceBuffer<float> channel_params_;  // mean then std, per channel
  PinnedBuffer<uint8_t> pinned_input_;
  PinnedBuffer<float> pinned_output_;
  std::vector<int64_t> output_offsets_;  // into pinned_output_, per output, in floats
  size_t input_sample_bytes_ = 0;
  PreprocessShape preprocess_;
  Event ev_start_, ev_uploaded_, ev_computed_, ev_downloaded_;
  std::optional<RunTimings> timings_;
  bool graph_replay_ = false;
  DeviceBuffer<float> graph_input_copy_;  // the input across the plain forward before a capture
  const uint8_t* pinned_user_ = nullptr;  // host memory registered by pin_host_input, uploaded from directly
  size_t pinned_user_bytes_ = 0;
  bool pinned_user_owned_ = false;  // registered by us (unregistered at destruction), not by a sibling
  cudaGraphExec_t graph_exec_ = nullptr;  // forward(graph_n_) as captured
  // run_batches' second slot and stream, made on its first call (not needed by run()).
  struct Overlap {
    Stream copy;
    DeviceBuffer<uint8_t> raw;       // the second raw-input slot (raw_input_ is the first)
    PinnedBuffer<uint8_t> pinned;    // the second staging slot, for input that is not page-locked
    Event uploaded[2], consumed[2], downloaded, started;
  };
  std::unique_ptr<Overlap> overlap_;
  int graph_n_ = 0;
};

}  // namespace engine::gpu

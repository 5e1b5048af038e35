#pragma once
// A model ready to classify: the backend, the loaded and planned model and its compiled executable,
// and the one batch loop that runs it. `engine run`, the Python package (cnnengine.load) and the
// server all classify through a Session, so each gets the same outputs bit for bit.
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"
#include "engine/core/graph.hpp"
#include "formats/model.hpp"

namespace engine::api {

struct SessionOptions {
  // "" = the fastest GPU backend for the model and precision where one can run it, else the best
  // available host backend, as `engine run` without --backend (engine/api/backend_choice.hpp).
  std::string backend;
  std::optional<int> max_batch;  // largest batch one device call runs; default: the backend's preferred batch
  Precision precision = Precision::FP32;
  bool deterministic = true;
  bool fuse = true;
  int threads = 0;         // CPU backends; 0 = all cores
  bool cuda_graph = true;  // GPU backends: replay repeated full batches as CUDA graphs
  // GPU backends: indices of Backend::devices() to run on. Empty: the current GPU. Several: one
  // executable per GPU driven as one (engine/core/multi_device.hpp), each with its own weights.
  std::vector<int> devices;
};

// The backend named (or the best available one for ""); throws std::runtime_error for an unknown
// or unavailable one. Comes first so that a wrong name fails before seconds of loading.
std::unique_ptr<Backend> open_backend(const std::string& name);
// The model at `path`, which must carry weights (an architecture-only graph has nothing to run).
std::shared_ptr<const formats::Model> load_runnable_model(const std::string& path);

// How run() goes through a call's samples, decided once per call.
struct RunPlan {
  int64_t step = 0;           // samples per loop step (and per on_outputs call)
  bool overlapped = false;    // steps go through Executable::run_batches (uploads overlap compute)
  bool graph_replay = false;  // forward passes replayed as CUDA graphs
};

// Optional observers of one run() call. They run on the calling thread, inside the run.
struct RunHooks {
  std::function<void(const RunPlan&)> on_plan;  // once, before the first sample runs
  // After each step: the outputs of samples [start, start + n) are written.
  std::function<void(int64_t start, int64_t n)> on_outputs;
  // A CUDA graph capture failed; the call goes on (and later calls stay) with plain launches.
  std::function<void(const std::exception&)> on_replay_failure;
};

// What a run() call measured, beside its outputs.
struct RunStats {
  std::optional<RunTimings> device_ms;  // summed over the steps, where the backend times them
};

class Session {
 public:
  // Throws (std::runtime_error, formats::FormatError, std::invalid_argument) with the engine's
  // message: unknown or unavailable backend, missing or invalid model files.
  Session(const std::string& model_path, const SessionOptions& options);
  // From a backend and a model the caller already has (open_backend, load_runnable_model):
  // plans and compiles. options.backend is not read; a null backend is chosen as for "".
  Session(std::unique_ptr<Backend> backend, std::shared_ptr<const formats::Model> model,
          const SessionOptions& options);

  const formats::Model& model() const { return *model_; }
  const Graph& graph() const { return graph_; }
  const Backend& backend() const { return *backend_; }
  const SessionOptions& options() const { return options_; }
  // Why the backend was chosen when the caller named none ("" when named).
  const std::string& backend_choice() const { return backend_choice_; }
  int max_batch() const { return exe_->max_batch(); }
  int64_t classes() const { return graph_.output_elements(0); }
  // Bytes of one raw sample in the model's input dtype and raw_shape.
  size_t sample_bytes() const { return sample_bytes_; }
  std::string execution_path() const { return exe_->execution_path(); }
  std::string plan_summary() const { return exe_->plan_summary(); }
  // Whether run_device() can take input in GPU memory (the GPU backends).
  bool accepts_device_input() const { return exe_->accepts_device_input(); }

  // The caller promises that [data, data + bytes) stays valid and unchanged for the session's life
  // and passes pointers into it to run(): a GPU backend page-locks it once so uploads go straight
  // from it. Best effort: false where the backend cannot, and run() works as before.
  bool pin_input(const void* data, size_t bytes) { return exe_->pin_host_input(data, bytes); }

  // `count` raw samples at `input` (host memory) -> `first_output` [count, classes()] floats, in
  // batches of max_batch(). Thread-safe: calls are serialised (an executable runs one batch at a time).
  RunStats run(const void* input, int64_t count, float* first_output, const RunHooks& hooks = {});
  // The same with `device_input` in the memory of the GPU the backend runs on (no host copy).
  RunStats run_device(const void* device_input, int64_t count, float* first_output, const RunHooks& hooks = {});
  // Every output: outputs[i] receives count * output_elements(i) floats (output_count() pointers),
  // from host memory, or from GPU memory where `on_device` (see run_device).
  RunStats run_outputs(const void* input, int64_t count, std::span<float* const> outputs, bool on_device = false);
  size_t output_count() const { return graph_.outputs.size(); }
  int64_t output_elements(size_t i) const { return graph_.output_elements(i); }

 private:
  void choose_backend_if_unnamed();
  void compile();
  // `all`: where every output goes (run_outputs); empty: outputs after the first go to other_outputs_.
  RunStats run_loop(const void* input, int64_t count, float* first_output, bool on_device, const RunHooks& hooks,
                    std::span<float* const> all = {});

  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  std::string backend_choice_;
  std::shared_ptr<const formats::Model> model_;
  Graph graph_;
  std::unique_ptr<Executable> exe_;
  size_t sample_bytes_ = 0;
  std::vector<std::vector<float>> other_outputs_;  // outputs after the first: computed, not returned
  std::mutex mutex_;
};

}  // namespace engine::api

#pragma once
// A model ready to classify: the backend, the loaded and planned model and its compiled executable,
// made and run exactly as `engine run` makes and runs them (same registry, loader, planner, compile
// options and batch loop), so that every caller gets `engine run`'s outputs bit for bit. The Python
// package (cnnengine.load) is one such caller.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"
#include "engine/core/graph.hpp"
#include "formats/model.hpp"

namespace engine::api {

struct SessionOptions {
  std::string backend;           // "" = the best available one, as `engine run` without --backend
  std::optional<int> max_batch;  // largest batch one device call runs; default: the backend's preferred batch
  Precision precision = Precision::FP32;
  bool deterministic = true;
  bool fuse = true;
  int threads = 0;         // CPU backends; 0 = all cores
  bool cuda_graph = true;  // GPU backends: replay repeated full batches as CUDA graphs (as `engine run`)
};

class Session {
 public:
  // Throws (std::runtime_error, formats::FormatError, std::invalid_argument) with the engine's
  // message: unknown or unavailable backend, missing or invalid model files.
  Session(const std::string& model_path, const SessionOptions& options);

  const formats::Model& model() const { return *model_; }
  const Graph& graph() const { return graph_; }
  const Backend& backend() const { return *backend_; }
  const SessionOptions& options() const { return options_; }
  int max_batch() const { return exe_->max_batch(); }
  int64_t classes() const { return graph_.output_elements(0); }
  // Bytes of one raw sample in the model's input dtype and raw_shape.
  size_t sample_bytes() const { return sample_bytes_; }
  std::string execution_path() const { return exe_->execution_path(); }
  std::string plan_summary() const { return exe_->plan_summary(); }
  // Whether run_device() can take input in GPU memory (the GPU backends).
  bool accepts_device_input() const { return exe_->accepts_device_input(); }

  // `count` raw samples at `input` (host memory) -> `first_output` [count, classes()] floats, in
  // batches of max_batch(). Thread-safe: calls are serialised (an executable runs one batch at a time).
  void run(const void* input, int64_t count, float* first_output);
  // The same with `device_input` in the memory of the GPU the backend runs on (no host copy).
  void run_device(const void* device_input, int64_t count, float* first_output);

 private:
  void run_batches(const void* input, int64_t count, float* first_output, bool on_device);

  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<const formats::Model> model_;
  Graph graph_;
  std::unique_ptr<Executable> exe_;
  size_t sample_bytes_ = 0;
  std::vector<std::vector<float>> other_outputs_;  // outputs after the first: computed, not returned
  std::mutex mutex_;
};

}  // namespace engine::api

#pragma once
// A backend is a small interface, as in ggml-backend: it says which nodes it can run, and compiles
// a whole planned Graph for a batch capacity into an Executable. Compile does all the expensive,
// allocating work once (weights to the device, arena, algorithm choice, workspace, pinned staging);
// Executable::run does none of it.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "engine/core/graph.hpp"

namespace engine {

enum class Precision { FP32, TF32 };

struct CompileOptions {
  int max_batch = 256;        // largest n a run() may be given
  bool deterministic = true;  // bitwise-reproducible results (no atomics, deterministic algorithms)
  Precision precision = Precision::FP32;
};

// Per-run timing a backend may report (GPU backends fill it from CUDA events).
struct RunTimings {
  double upload_ms = 0, compute_ms = 0, download_ms = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;
  virtual int max_batch() const = 0;
  // `input` holds n raw samples in the model's input dtype and raw_shape (uint8 pixels or float32).
  // outputs[i] receives n * graph.output_elements(i) floats. 1 <= n <= max_batch().
  virtual void run(const void* input, int n, std::span<float* const> outputs) = 0;
  // Timing of the most recent run(), when the backend measures it.
  virtual std::optional<RunTimings> last_timings() const { return std::nullopt; }
  // One line per decision made at compile time (algorithms, workspace), for `engine info`/logs.
  virtual std::string plan_summary() const { return {}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Human-readable: what it runs on, e.g. "CUDA kernels on NVIDIA H100 80GB HBM3 (sm_90)".
  virtual std::string description() const = 0;
  // Why this backend cannot run the node, or nullopt when it can.
  virtual std::optional<std::string> unsupported(const formats::Node& node) const = 0;
  virtual std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options) = 0;
};

// Throws std::runtime_error naming every node the backend cannot run, before anything runs.
void check_supported(const Backend& backend, const Graph& graph);

}  // namespace engine

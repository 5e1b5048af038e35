#pragma once
// A backend is a small interface, as in ggml-backend: it says which nodes it can run, and compiles
// a whole planned Graph for a batch capacity into an Executable. Compile does all the expensive,
// allocating work once (weights to the device, arena, algorithm choice, workspace, pinned staging);
// Executable::run does none of it.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/staged_execution.hpp"
#include "engine/core/train.hpp"

namespace engine {

// fp32: exact float arithmetic. tf32: GPU tensor cores with 10-bit mantissas (cudnn). fp16, bf16,
// int8: reduced precisions; the reference backend emulates them (weights and activations
// rounded or quantized as a device would store them, sums in double) so that each has an accuracy
// measured before any device kernel exists; int8 needs the model's calibration (engine calibrate).
enum class Precision { FP32, TF32, FP16, BF16, INT8 };
const char* precision_name(Precision p);                      // "fp32", ...
std::optional<Precision> parse_precision(const std::string& name);

// The most threads a CPU backend is asked for (--threads, threads=): far above any core count the
// engine meets, low enough that a typo cannot ask the system for millions of threads.
inline constexpr int kMaxThreads = 4096;

struct CompileOptions {
  int max_batch = 256;        // largest n a run() may be given
  bool deterministic = true;  // bitwise-reproducible results (no atomics, deterministic algorithms)
  Precision precision = Precision::FP32;
  // Backends may run several nodes as one kernel (the custom backend's fused path). false asks for
  // the per-node kernels, for comparisons and tests (`--no-fuse`).
  bool fuse = true;
  // CPU backends: threads a run may use (like ONNX Runtime's intra_op_num_threads); 0 = all cores
  // (OpenMP's default, which OMP_NUM_THREADS overrides). GPU backends ignore it.
  int threads = 0;
  // GPU backends: the CUDA device (an index of Backend::devices()) the executable binds to; every
  // CUDA call it makes, destruction included, runs with that device current. -1: the device current
  // when compile() is called (0 unless the caller set another). CPU backends ignore it.
  int device = -1;
};

// Per-run timing a backend may report (GPU backends fill it from CUDA events).
struct RunTimings {
  double upload_ms = 0, compute_ms = 0, download_ms = 0;
};

// `count` raw samples (any count >= 0) of `sample_bytes` each, run in batches of `batch`
// (1..max_batch()); outputs[i] receives count * output_elements[i] floats.
struct BatchStream {
  const void* input = nullptr;
  size_t sample_bytes = 0;
  int64_t count = 0;
  int batch = 1;
  std::span<float* const> outputs;
  std::span<const int64_t> output_elements;  // per output, floats per sample
};

// Throws std::invalid_argument when a BatchStream does not fit an executable of max_batch.
void check_batch_stream(const BatchStream& s, int max_batch);

class Executable {
 public:
  virtual ~Executable() = default;
  virtual int max_batch() const = 0;
  // `input` holds n raw samples in the model's input dtype and raw_shape (uint8 pixels or float32).
  // outputs[i] receives n * graph.output_elements(i) floats. 1 <= n <= max_batch().
  virtual void run(const void* input, int n, std::span<float* const> outputs) = 0;
  // Many batches in one call: the default is a loop over run(); a GPU executable overlaps the
  // upload of the next batch with the compute of this one (overlaps_batches()). The same bits as
  // run() on the same batches; last_timings() then covers the whole call.
  virtual void run_batches(const BatchStream& s);
  virtual bool overlaps_batches() const { return false; }
  // Timing of the most recent run(), when the backend measures it.
  virtual std::optional<RunTimings> last_timings() const { return std::nullopt; }
  // One line per decision made at compile time (algorithms, workspace), for `engine info`/logs.
  virtual std::string plan_summary() const { return {}; }
  // One line: which execution path runs (e.g. "fused (conv chain + dense chain kernels)" or
  // "per-node kernels (not fused: node 'a' (add) ...)"), for `engine run`, `info` and `bench`.
  virtual std::string execution_path() const { return {}; }
  // The caller promises that [data, data + bytes) stays valid and unchanged in size for the
  // executable's life and will pass pointers into it to run(): a GPU backend page-locks it once so
  // uploads go straight from it (no copy through the staging buffer). Best effort: a backend that
  // cannot returns false and run() works as before.
  virtual bool pin_host_input(const void* /*data*/, size_t /*bytes*/) { return false; }
  // GPU backends: run() with the n raw samples already in the memory of the executable's GPU (an
  // array handed over through DLPack), so they go through no host memory. Host backends keep the
  // defaults: accepts_device_input() false, run_device_input() throws std::logic_error.
  virtual bool accepts_device_input() const { return false; }
  virtual void run_device_input(const void* /*device_input*/, int /*n*/, std::span<float* const> /*outputs*/) {
    throw std::logic_error("this backend runs on host memory and cannot read device input");
  }

  // The executable's run taken apart into timed scopes, for benchmarks (engine/core/staged_execution.hpp);
  // nullptr where the backend does not offer it.
  virtual StagedExecution* staged_execution() { return nullptr; }
  // Replay each batch size's forward pass from a CUDA graph captured once per size (GPU backends).
  // Returns why not when the backend cannot (or on = false: back to plain launches, always possible).
  virtual std::optional<std::string> use_graph_replay(bool on) {
    if (on) return std::string("this backend has no graph replay");
    return std::nullopt;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Human-readable: what it runs on, e.g. "CUDA kernels on NVIDIA H100 80GB HBM3 (sm_90)".
  virtual std::string description() const = 0;
  // Why this backend cannot run the node, or nullopt when it can.
  virtual std::optional<std::string> unsupported(const formats::Node& node) const = 0;
  // Which precisions compile() takes (fp32 and tf32 by default: a backend without TF32 runs fp32).
  virtual bool supports(Precision p) const { return p == Precision::FP32 || p == Precision::TF32; }
  virtual std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options) = 0;
  // The batch capacity `engine run` plans for when the user gives none: small on a CPU (cache-sized
  // tiles, prompt progress), large on a GPU (a batch must fill the device to pay for its launches).
  virtual int preferred_batch() const { return 256; }
  // GPU backends: one line per device an executable can bind to (CompileOptions::device), by index:
  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)". Empty for a backend that runs on the host.
  virtual std::vector<std::string> devices() const { return {}; }

  // Training (engine/core/train.hpp). A backend that cannot train keeps the defaults: cannot_train()
  // says why in one line, and compile_training() throws std::runtime_error with that reason.
  virtual std::optional<std::string> cannot_train() const;
  virtual std::unique_ptr<TrainExecutable> compile_training(const Graph& graph, const TrainOptions& options);
};

// Throws std::runtime_error naming every node the backend cannot run, before anything runs.
void check_supported(const Backend& backend, const Graph& graph);
// Throws std::invalid_argument when the backend does not compute options.precision.
void require_precision(const Backend& backend, const CompileOptions& options);

}  // namespace engine

#pragma once
// engine bench: benchmarks of every backend on a model (trtexec-style) and the seeds' Part 1
// CPU-vs-GPU study of matrix add and multiply. The CLI parses arguments into these options and
// calls run_*; everything else (timing, statistics, ceilings, reports, JSON) lives here. Nothing
// here names a backend type: backends come from the registry and are driven through Executable's
// staged-execution interface (engine/core/backend.hpp).
#include <string>
#include <vector>

namespace engine::bench {

struct ModelBenchOptions {
  std::string model;                         // format-v1 graph file
  std::vector<std::string> backends{"all"};  // names, or "all": every backend available here
  std::vector<int> batches{1, 64, 1024, 65536};
  double warmup_ms = 200;  // per case, before the first repetition
  int iterations = 10;     // at least this many per repetition...
  double duration_s = 1;   // ...and at least this long
  int repetitions = 3;
  std::vector<double> percentiles{90, 99};
  bool cuda_graph = false;         // also measure GPU backends replaying CUDA graphs
  bool no_data_transfers = false;  // compute-only scope only
  bool no_fuse = false;            // per-node kernels even where a backend would fuse
  bool nondeterministic = false;   // let backends measure algorithms of any determinism (cudnn)
  std::string precision = "fp32";  // CompileOptions::precision, by name (engine run --precision)
  bool profile = false;            // per-layer table from a separate run
  int profile_batch = 0;           // 0: the largest batch whose latency was <= 50 ms
  int max_cpu_batch = 4096;        // larger batches are skipped on the CPU backends (time)
  int threads = 0;                 // CPU backends' threads (CompileOptions::threads); 0: all cores
  // GPU backends: "all" or "0,1,..." (engine::parse_device_list); empty: the current GPU. Every
  // case runs on the first GPU listed; with several, each batch is also split across all of them
  // (multi_device_bench.hpp), and that first GPU alone is re-timed the same way for the scaling.
  std::string devices;
  std::string json_path;
  std::string command_line;  // recorded in the JSON
};

struct OpsBenchOptions {
  std::vector<std::string> ops{"add", "matmul"};
  std::vector<int> sizes;    // n of the n x n matrices; empty: defaults per op
  int sweep_n = 0;           // size of the launch-shape sweep; 0: 1000 for matmul, 4000 for add
  double min_time_ms = 100;  // each measurement runs at least this long...
  int min_iterations = 5;    // ...and this many times (after a warm-up run)
  double cpu_limit_s = 3;    // skip a CPU measurement predicted to take longer per run
  std::string json_path;
  std::string command_line;
};

// Both print progress to stderr (spdlog) and the report to stdout; they throw on errors that stop
// the whole benchmark (an unreadable model, an unknown backend) and record the others (a batch
// that does not fit, a backend that cannot capture graphs) as notes in the report and the JSON.
int run_model_bench(const ModelBenchOptions& options);
int run_ops_bench(const OpsBenchOptions& options);

}  // namespace engine::bench

// engine bench MODEL | engine bench ops: argument parsing only; the benchmarks live in engine/bench.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/bench/bench.hpp"
#include "engine/cli/commands.hpp"
#include "engine/core/backend.hpp"

namespace engine::cli {
namespace {

bench::ModelBenchOptions model_options;
bench::OpsBenchOptions ops_options;
CLI::App* ops_cmd = nullptr;

// The command as typed, for the JSON (Linux: /proc/self/cmdline holds NUL-separated arguments).
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  for (char c : raw) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app) {
  auto& o = model_options;
  auto* cmd = app.add_subcommand(
      "bench",
      "Benchmark MODEL on every backend (latency, images/s, ceilings), or `bench ops`: matrix add/multiply "
      "CPU vs GPU");
  cmd->add_option("MODEL", o.model, "Model graph file (format v1 .json)");
  cmd->add_option("--backend", o.backends, "Backends, comma-separated, or all (every backend available here)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--batch", o.batches, "Batch sizes, comma-separated; each is planned as its own executable")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU backends: threads to use (default: all cores)")
      ->check(CLI::Range(1, engine::kMaxThreads));
  cmd->add_option("--devices", o.devices,
                  "GPU backends: all or indices like 0,1 (see `engine backends`); cases run on the first, and "
                  "with several each batch is also split across all of them (scaling vs the first alone)");
  cmd->add_option("--warmup", o.warmup_ms, "Warm-up per case, milliseconds")->capture_default_str();
  cmd->add_option("--iterations", o.iterations, "At least this many iterations per repetition")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--duration", o.duration_s, "At least this many seconds per repetition")->capture_default_str();
  cmd->add_option("--repetitions", o.repetitions, "Repetitions of each case (mean ± sd across them)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--percentile", o.percentiles, "Latency percentiles to report, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--cuda-graph", o.cuda_graph, "Also measure GPU backends replaying the forward pass as a CUDA graph");
  cmd->add_flag("--no-data-transfers", o.no_data_transfers, "Measure the compute-only scope only (no end-to-end)");
  cmd->add_flag("--no-fuse", o.no_fuse, "Run every node with its own kernel (the custom backend otherwise fuses chains)");
  cmd->add_flag("--nondeterministic", o.nondeterministic,
                "As engine run --nondeterministic: backends may pick algorithms by measurement, of any determinism");
  cmd->add_option("--precision", o.precision,
                  "As engine run --precision: fp32, tf32, fp16, bf16 (cudnn: tensor cores), int8; a backend that "
                  "does not compute it is reported skipped")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "int8"}))
      ->capture_default_str();
  cmd->add_flag("--profile", o.profile, "Per-layer table (time, share, GFLOP/s, GB/s) from a separate run");
  cmd->add_option("--profile-batch", o.profile_batch,
                  "Batch of the --profile run (default: the largest whose median latency was <= 50 ms)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-cpu-batch", o.max_cpu_batch, "Skip larger batches on the cpu backend (time)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write every result (repetitions, device, versions, commit) to FILE");

  auto& p = ops_options;
  ops_cmd = cmd->add_subcommand("ops",
                                "The seeds' Part 1 study: n x n matrix add/multiply on CPU, custom kernels "
                                "(naive, tiled) and cuBLAS, with and without transfers");
  ops_cmd->add_option("--op", p.ops, "add, matmul, or both (comma-separated)")->delimiter(',')->capture_default_str();
  ops_cmd->add_option("--n", p.sizes, "Matrix sizes n, comma-separated (default add 100..10000, matmul 100..3000)")
      ->delimiter(',')
      ->check(CLI::Range(1, 46340));
  ops_cmd->add_option("--sweep-n", p.sweep_n, "Size of the grid/block sweep (default 4000 add, 1000 matmul)")
      ->check(CLI::PositiveNumber);
  ops_cmd->add_option("--min-time", p.min_time_ms, "Each measurement runs at least this many ms")
      ->capture_default_str();
  ops_cmd->add_option("--min-iterations", p.min_iterations, "...and at least this many times")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  ops_cmd->add_option("--cpu-limit", p.cpu_limit_s, "Skip CPU runs predicted to take longer (seconds)")
      ->capture_default_str();
  ops_cmd->add_option("--json", p.json_path, "Write every measurement to FILE");
  return cmd;
}

int bench_command(const CLI::App& /*cmd*/) {
  if (ops_cmd && ops_cmd->parsed()) {
    ops_options.command_line = command_line();
    return bench::run_ops_bench(ops_options);
  }
  if (model_options.model.empty()) {
    std::fprintf(stderr, "error: engine bench needs MODEL, or `engine bench ops` (see --help)\n");
    return 2;
  }
  model_options.command_line = command_line();
  return bench::run_model_bench(model_options);
}

}  // namespace engine::cli

// engine bench MODEL: every backend x batch size, two scopes, trtexec-style statistics.
//
// Each (backend, batch) is its own executable (max_batch = batch), driven through Executable's
// staged interface:
//   compute  compute(n) on an input staged once: the nodes only (inputs already on the device);
//   e2e      stage_input (uint8 pixels from the executable's pinned staging, upload, preprocessing),
//            compute, fetch_outputs (probabilities to pinned host memory), synchronize.
// Time points are CUDA events on the executable's stream for GPU backends and a steady clock on the
// CPU, recorded between the pieces, so one iteration gives H2D, compute and D2H apart. Every
// iteration is synchronised before the next (latency, not pipelined throughput); the host time
// spent enqueuing is kept too, which shows when the GPU waits for launches. Executables that
// overlap batches (GPU, uint8 input) get one more end-to-end case, mode "pipelined": 8 batches
// streamed through run_batches from page-locked host memory, the host time of the call per batch
// (uploads overlapping compute: the throughput of a long stream of images).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>

#include "engine/bench/bench.hpp"
#include "engine/bench/common.hpp"
#include "engine/bench/model_cost.hpp"
#include "engine/bench/multi_device_bench.hpp"
#include "engine/core/multi_device.hpp"
#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/model_loader.hpp"

namespace engine::bench {
namespace {

// The staged execution every backend engine bench times offers (engine/core/staged_execution.hpp).
StagedExecution& staged(Executable& exe) {
  StagedExecution* st = exe.staged_execution();
  if (!st) throw std::logic_error("the backend does not implement staged execution");
  return *st;
}

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

enum class Scope { Compute, EndToEnd };
const char* scope_key(Scope s) { return s == Scope::Compute ? "compute" : "e2e"; }
const char* scope_text(Scope s) { return s == Scope::Compute ? "compute only" : "end to end"; }

struct Samples {
  std::vector<double> latency, h2d, compute, d2h, enqueue;
  void clear() { *this = Samples{}; }
  void append(const Samples& o) {
    latency.insert(latency.end(), o.latency.begin(), o.latency.end());
    h2d.insert(h2d.end(), o.h2d.begin(), o.h2d.end());
    compute.insert(compute.end(), o.compute.begin(), o.compute.end());
    d2h.insert(d2h.end(), o.d2h.begin(), o.d2h.end());
    enqueue.insert(enqueue.end(), o.enqueue.begin(), o.enqueue.end());
  }
};

struct Repetition {
  int iterations = 0;
  double seconds = 0;  // host wall time of the repetition's loop
  Stats latency;
  double images_per_s = 0;  // batch / median latency
  double wall_images_per_s = 0;
};

struct CaseResult {
  std::string backend;
  int batch = 0;
  Scope scope = Scope::Compute;
  std::string mode;  // "plain" (every call launched) or "graph" (CUDA graph replay of compute)
  bool on_device = false;
  std::vector<Repetition> reps;
  Stats latency, h2d, compute, d2h, enqueue;
  double images_per_s = 0, wall_images_per_s = 0;
  double rep_mean = 0, rep_sd = 0, spread_pct = 0;
  double ceiling = 0, fraction = 0;
  bool outputs_finite = true;
};

struct Skip {
  std::string backend;
  int batch = 0;
  std::string reason;
};

struct Ceiling {
  double compute = 0, e2e = 0;  // images/s at a batch
};

// The input a benchmark feeds: random raw samples (not zeros: they can run faster than real data
// and hide unwritten outputs), in the executable's pinned staging when it has one.
class InputData {
 public:
  InputData(Executable& exe, const formats::InputSpec& spec, int n) {
    const bool u8 = spec.dtype == formats::InputDType::UInt8;
    const size_t elements = size_t(formats::element_count(spec.raw_shape)) * size_t(n);
    bytes_ = elements * (u8 ? 1 : 4);
    data_ = staged(exe).input_staging();
    if (!data_) {
      own_.resize(bytes_);
      data_ = own_.data();
    }
    std::mt19937 rng(1234);
    if (u8) {
      auto* p = static_cast<uint8_t*>(data_);
      for (size_t i = 0; i < elements; ++i) p[i] = uint8_t(rng() & 0xFF);
    } else {
      std::uniform_real_distribution<float> dist(0.0f, 1.0f);
      auto* p = static_cast<float*>(data_);
      for (size_t i = 0; i < elements; ++i) p[i] = dist(rng);
    }
  }
  const void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::vector<uint8_t> own_;
  size_t bytes_ = 0;
};

class ModelBench {
 public:
  explicit ModelBench(const ModelBenchOptions& o) : o_(o) {}
  int run();

 private:
  void check_options() const;
  std::vector<std::string> pick_backends();
  void bench_backend(const std::string& name, Backend& backend);
  void bench_split(Backend& backend, const std::string& name, int n);
  void bench_case(Executable& exe, const std::string& backend, int n, const std::string& mode, Scope scope,
                  const InputData& input);
  void one_iteration(Executable& exe, Scope scope, int n, const void* input, Samples& s);
  void prepare_stream(Executable& exe, int n, const void* input);
  bool outputs_finite(Executable& exe, int n, const void* input);
  Ceiling ceiling(bool on_device, int n) const;
  // The CPU backends' threads (--threads, else all) at the measured per-thread FMA peak; all
  // threads' measured rate when every thread is in use.
  double host_fma_gflops() const {
    if (o_.threads > 0 && o_.threads < host_.threads) return host_.fma_gflops_one * o_.threads;
    return host_.fma_gflops_all;
  }
  void profile(Backend& backend, const std::string& name, int n);
  void print_case_block(const std::string& backend, int n, const std::string& mode) const;
  void print_overview() const;
  void derive_hints();
  Json to_json() const;

  const ModelBenchOptions& o_;
  std::shared_ptr<const formats::Model> model_;
  std::optional<Graph> graph_;
  ModelCost cost_;
  HostInfo host_;
  DeviceInfo device_;
  std::vector<CaseResult> results_;
  std::vector<Skip> skipped_;
  std::vector<std::string> notes_, hints_;
  Json profiles_ = Json::array();
  std::vector<int> devices_;  // --devices; empty: not given
  std::vector<MultiCase> multi_;
  std::unique_ptr<TimePoint> tp_[4];
  size_t header_notes_ = 0;  // notes printed in the header; later ones go after the summary
  bool complete_ = false;    // false in the JSON written after each batch, true in the final one
  // The "pipelined" end-to-end mode: kStreamBatches batches of n, streamed through run_batches from
  // page-locked host memory (the next batch's upload overlapping this one's compute).
  static constexpr int kStreamBatches = 8;
  bool pipelined_ = false;
  std::vector<uint8_t> stream_input_;
  std::vector<std::vector<float>> stream_outputs_;
  std::vector<float*> stream_pointers_;
  std::vector<int64_t> stream_elements_;
  BatchStream stream_;
};

void ModelBench::check_options() const {
  if (o_.batches.empty()) throw std::invalid_argument("--batch: give at least one batch size");
  for (int b : o_.batches)
    if (b < 1) throw std::invalid_argument(fmt::format("--batch: {} is not a positive batch size", b));
  for (double p : o_.percentiles)
    if (!(p > 0 && p < 100)) throw std::invalid_argument(fmt::format("--percentile: {} is outside (0, 100)", p));
  if (o_.iterations < 1) throw std::invalid_argument("--iterations must be at least 1");
  if (o_.repetitions < 1) throw std::invalid_argument("--repetitions must be at least 1");
  if (!(o_.duration_s >= 0)) throw std::invalid_argument("--duration must be >= 0");
  if (!(o_.warmup_ms >= 0)) throw std::invalid_argument("--warmup must be >= 0");
}

std::vector<std::string> ModelBench::pick_backends() {
  const auto& registry = BackendRegistry::instance();
  std::vector<std::string> asked;
  bool all = false;
  for (const auto& b : o_.backends) {
    if (b == "all")
      all = true;
    else if (!registry.find(b)) {
      std::string names;
      for (const auto& e : registry.entries()) names += (names.empty() ? "" : ", ") + e.name;
      throw std::invalid_argument(fmt::format("--backend: unknown backend '{}' (built in: {}, or all)", b, names));
    } else if (std::find(asked.begin(), asked.end(), b) == asked.end()) {
      asked.push_back(b);
    }
  }
  if (all || asked.empty()) {
    // Highest priority first (the GPU backends before the CPU ones), so a run cut short by a
    // time limit has measured what matters most.
    std::vector<const BackendEntry*> entries;
    for (const auto& e : registry.entries()) entries.push_back(&e);
    std::stable_sort(entries.begin(), entries.end(),
                     [](const BackendEntry* a, const BackendEntry* b) { return a->priority > b->priority; });
    asked.clear();
    for (const auto* e : entries) asked.push_back(e->name);
  }
  std::vector<std::string> usable;
  for (const auto& name : asked) {
    const BackendEntry* e = registry.find(name);
    const auto why = e->unavailable_reason ? e->unavailable_reason() : std::nullopt;
    if (why) {
      notes_.push_back(fmt::format("backend {} is not available here: {}", name, *why));
      spdlog::warn("backend {} is not available here: {}", name, *why);
      skipped_.push_back(Skip{name, 0, "not available: " + *why});
      continue;
    }
    if (!o_.devices.empty()) {
      // --devices names GPUs: a host backend asked for by name is an error (as in `engine run`); one
      // that came with `all` is left out, with a note.
      const auto gpus = registry.create(name)->devices();
      if (gpus.empty()) {
        if (!all) throw std::invalid_argument(fmt::format("--devices: backend '{}' runs on the host, not on GPUs "
                                                          "(--threads sets its parallelism)", name));
        notes_.push_back(fmt::format("backend {} left out: --devices names GPUs and it runs on the host", name));
        skipped_.push_back(Skip{name, 0, "runs on the host (--devices given)"});
        continue;
      }
      if (devices_.empty()) devices_ = parse_device_list(o_.devices, int(gpus.size()));
    }
    usable.push_back(name);
  }
  if (!o_.devices.empty() && devices_.empty() && !usable.empty())
    throw std::invalid_argument("--devices: none of the backends asked for runs on a GPU");
  if (usable.empty()) throw std::runtime_error("none of the backends asked for can run here");
  return usable;
}

Ceiling ModelBench::ceiling(bool on_device, int n) const {
  Ceiling c;
  const double N = n;
  if (on_device) {
    if (device_.fma_tflops <= 0) return c;
    // tf32, fp16, bf16 and int8 run on tensor cores, whose rate this bench does not measure: their
    // ceiling is the memory time alone (a looser bound than fp32's, where the FMA rate counts).
    const bool tensor_cores = parse_precision(o_.precision).value_or(Precision::FP32) != Precision::FP32;
    const double arithmetic = tensor_cores ? 0.0 : cost_.flops * N / (device_.fma_tflops * 1e12);
    const double memory_compute = (cost_.device_bytes_compute() * N + cost_.weight_bytes) / (device_.copy_gbps * 1e9);
    const double memory_e2e = (cost_.device_bytes_e2e() * N + cost_.weight_bytes) / (device_.copy_gbps * 1e9);
    const double link =
        cost_.raw_input_bytes * N / (device_.h2d_gbps * 1e9) + cost_.output_bytes * N / (device_.d2h_gbps * 1e9);
    c.compute = N / std::max(arithmetic, memory_compute);
    c.e2e = N / (std::max(arithmetic, memory_e2e) + link);  // serial, as measured: upload, compute, download
  } else {
    // int8 runs integer dot products, not fp32 FMAs: the fp32 rate bounds nothing there.
    if (parse_precision(o_.precision).value_or(Precision::FP32) == Precision::INT8) return c;
    const double rate = host_fma_gflops();
    if (rate <= 0) return c;
    c.compute = c.e2e = 1.0 / (cost_.flops / (rate * 1e9));
  }
  return c;
}

// The stream's input is the staged batch repeated; it must outlive the executable that page-locks
// it (bench_backend makes a new executable per batch size after this one is gone).
void ModelBench::prepare_stream(Executable& exe, int n, const void* input) {
  const size_t sample_bytes = size_t(formats::element_count(graph_->model->input.raw_shape)) *
                              (graph_->model->input.dtype == formats::InputDType::UInt8 ? 1 : 4);
  const size_t batch_bytes = sample_bytes * size_t(n);
  stream_input_.resize(batch_bytes * kStreamBatches);
  for (int k = 0; k < kStreamBatches; ++k)
    std::memcpy(stream_input_.data() + batch_bytes * size_t(k), input, batch_bytes);
  exe.pin_host_input(stream_input_.data(), stream_input_.size());
  stream_outputs_.clear();
  stream_pointers_.clear();
  stream_elements_.clear();
  for (size_t i = 0; i < graph_->outputs.size(); ++i) {
    stream_elements_.push_back(graph_->output_elements(i));
    stream_outputs_.emplace_back(size_t(graph_->output_elements(i)) * size_t(n) * kStreamBatches);
    stream_pointers_.push_back(stream_outputs_.back().data());
  }
  stream_ = BatchStream{stream_input_.data(), sample_bytes, int64_t(n) * kStreamBatches, n, stream_pointers_,
                        stream_elements_};
}

void ModelBench::one_iteration(Executable& exe, Scope scope, int n, const void* input, Samples& s) {
  StagedExecution& st = staged(exe);
  const auto h0 = Clock::now();
  if (pipelined_) {
    // Host time around the whole stream (run_batches returns with the outputs in host memory), per batch.
    exe.run_batches(stream_);
    const double ms = ms_between(h0, Clock::now()) / kStreamBatches;
    s.latency.push_back(ms);
    s.enqueue.push_back(ms);
    const RunTimings t = exe.last_timings().value_or(RunTimings{});
    s.h2d.push_back(t.upload_ms / kStreamBatches);
    s.compute.push_back(t.compute_ms / kStreamBatches);
    s.d2h.push_back(t.download_ms / kStreamBatches);
    return;
  }
  if (scope == Scope::Compute) {
    tp_[0]->record();
    st.compute(n);
    tp_[1]->record();
    const auto h1 = Clock::now();
    s.latency.push_back(tp_[1]->ms_since(*tp_[0]));
    s.enqueue.push_back(ms_between(h0, h1));
    return;
  }
  tp_[0]->record();
  st.stage_input(input, n);
  tp_[1]->record();
  st.compute(n);
  tp_[2]->record();
  st.fetch_outputs(n);
  tp_[3]->record();
  const auto h1 = Clock::now();
  st.synchronize();
  const double up = tp_[1]->ms_since(*tp_[0]), comp = tp_[2]->ms_since(*tp_[1]), down = tp_[3]->ms_since(*tp_[2]);
  s.h2d.push_back(up);
  s.compute.push_back(comp);
  s.d2h.push_back(down);
  s.latency.push_back(tp_[3]->ms_since(*tp_[0]));
  s.enqueue.push_back(ms_between(h0, h1));
}

bool ModelBench::outputs_finite(Executable& exe, int n, const void* input) {
  StagedExecution& st = staged(exe);
  st.stage_input(input, n);
  st.compute(n);
  st.fetch_outputs(n);
  st.synchronize();
  for (size_t i = 0; i < graph_->outputs.size(); ++i) {
    const float* out = st.staged_output(i);
    const size_t count = size_t(graph_->output_elements(i)) * size_t(n);
    for (size_t k = 0; k < count; ++k)
      if (!std::isfinite(out[k])) return false;
  }
  return true;
}

void ModelBench::bench_case(Executable& exe, const std::string& backend, int n, const std::string& mode, Scope scope,
                            const InputData& input) {
  StagedExecution& st = staged(exe);
  CaseResult r;
  r.backend = backend;
  r.batch = n;
  r.scope = scope;
  r.mode = mode;
  r.on_device = st.input_staging() != nullptr;  // inputs cross a host-device link: a device backend
  const void* in = input.data();

  if (scope == Scope::Compute) {
    st.stage_input(in, n);
    st.synchronize();
  }
  pipelined_ = mode == "pipelined";
  // Warm-up: at least two iterations (the first may capture a graph or load kernels lazily).
  Samples scratch;
  const auto w0 = Clock::now();
  for (int i = 0; i < 2 || ms_between(w0, Clock::now()) < o_.warmup_ms; ++i) one_iteration(exe, scope, n, in, scratch);

  Samples all;
  std::vector<double> rep_rates;
  for (int rep = 0; rep < o_.repetitions; ++rep) {
    Samples s;
    const auto t0 = Clock::now();
    int iterations = 0;
    double elapsed = 0;
    for (;;) {
      one_iteration(exe, scope, n, in, s);
      ++iterations;
      elapsed = ms_between(t0, Clock::now()) / 1e3;
      // At least --iterations and --duration; a case whose iterations are very slow stops at four
      // times --duration (still at least two iterations).
      if (elapsed >= o_.duration_s &&
          (iterations >= o_.iterations || (elapsed >= 4 * o_.duration_s && iterations >= 2)))
        break;
      if (iterations >= 2'000'000) break;
    }
    Repetition rr;
    rr.iterations = iterations;
    rr.seconds = elapsed;
    rr.latency = summarize(s.latency, o_.percentiles);
    rr.images_per_s = n / (rr.latency.median * 1e-3);
    const int per_iteration = pipelined_ ? n * kStreamBatches : n;  // a pipelined iteration streams kStreamBatches
    rr.wall_images_per_s = double(per_iteration) * iterations / elapsed;
    rep_rates.push_back(rr.images_per_s);
    r.reps.push_back(rr);
    all.append(s);
  }
  r.latency = summarize(all.latency, o_.percentiles);
  r.enqueue = summarize(all.enqueue, o_.percentiles);
  if (scope == Scope::EndToEnd) {
    r.h2d = summarize(all.h2d, o_.percentiles);
    r.compute = summarize(all.compute, o_.percentiles);
    r.d2h = summarize(all.d2h, o_.percentiles);
  }
  r.images_per_s = n / (r.latency.median * 1e-3);
  double wall_s = 0, images = 0;
  for (const auto& rr : r.reps) {
    wall_s += rr.seconds;
    images += double(pipelined_ ? n * kStreamBatches : n) * rr.iterations;
  }
  r.wall_images_per_s = images / wall_s;
  std::tie(r.rep_mean, r.rep_sd) = mean_sd(rep_rates);
  r.spread_pct = r.rep_mean > 0 ? 100.0 * r.rep_sd / r.rep_mean : 0;
  const Ceiling c = ceiling(r.on_device, n);
  r.ceiling = scope == Scope::Compute ? c.compute : c.e2e;
  r.fraction = r.ceiling > 0 ? r.images_per_s / r.ceiling : 0;
  results_.push_back(std::move(r));
}

// The batch split across every GPU of --devices, against the first alone (multi_device_bench.hpp).
void ModelBench::bench_split(Backend& backend, const std::string& name, int n) {
  MultiSettings settings;
  settings.warmup_ms = o_.warmup_ms;
  settings.duration_s = o_.duration_s;
  settings.iterations = o_.iterations;
  settings.repetitions = o_.repetitions;
  settings.percentiles = o_.percentiles;
  settings.transfers = !o_.no_data_transfers;
  CompileOptions copts;
  copts.fuse = !o_.no_fuse;
  copts.deterministic = !o_.nondeterministic;
  copts.precision = parse_precision(o_.precision).value_or(Precision::FP32);
  copts.threads = o_.threads;
  try {
    multi_.push_back(bench_multi_device(backend, *graph_, copts, devices_, n, settings));
    print_multi_case(multi_.back());
  } catch (const std::exception& e) {
    skipped_.push_back(Skip{name, n, fmt::format("split across {} GPUs: {}", devices_.size(), e.what())});
    notes_.push_back(fmt::format("{}: batch {}: split across GPUs skipped: {}", name, n, e.what()));
    spdlog::warn("{}: batch {}: split across GPUs skipped: {}", name, n, e.what());
  }
}

void ModelBench::bench_backend(const std::string& name, Backend& backend) {
  std::vector<int> batches;
  for (int b : o_.batches) {
    if ((name == "cpu" || name == "reference") && b > o_.max_cpu_batch) {
      // The CPU backends, named here only for this time limit.
      const std::string why = fmt::format(
          "batch {} > --max-cpu-batch {} (each iteration would take long on the "
          "CPU; raise --max-cpu-batch to run it)",
          b, o_.max_cpu_batch);
      skipped_.push_back(Skip{name, b, why});
      continue;
    }
    batches.push_back(b);
  }
  for (int n : batches) {
    spdlog::info("{}: batch {}: compiling", name, n);
    std::unique_ptr<Executable> exe;
    try {
      CompileOptions copts;
      copts.max_batch = n;
      copts.fuse = !o_.no_fuse;
      copts.deterministic = !o_.nondeterministic;
      copts.precision = parse_precision(o_.precision).value_or(Precision::FP32);
      copts.threads = o_.threads;
      if (!devices_.empty()) copts.device = devices_.front();
      exe = backend.compile(*graph_, copts);
    } catch (const std::exception& e) {
      skipped_.push_back(Skip{name, n, fmt::format("compile failed: {}", e.what())});
      notes_.push_back(fmt::format("{}: batch {} skipped: compile failed: {}", name, n, e.what()));
      spdlog::warn("{}: batch {}: compile failed: {}", name, n, e.what());
      continue;
    }
    if (const std::string path = exe->execution_path(); !path.empty()) {
      const std::string note = fmt::format("{}: {}", name, path);
      if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
      spdlog::info("{}: batch {}: {}", name, n, path);
    }
    if (!exe->staged_execution()) {
      skipped_.push_back(Skip{name, n, "the backend does not implement staged execution"});
      continue;
    }
    for (auto& tp : tp_) tp = exe->staged_execution()->make_time_point();
    const InputData input(*exe, graph_->model->input, n);
    const bool finite = outputs_finite(*exe, n, input.data());
    if (!finite) {
      notes_.push_back(fmt::format("{}: batch {}: outputs are not all finite (an unwritten or wrong output)", name, n));
      spdlog::error("{}: batch {}: outputs are not all finite", name, n);
    }
    std::vector<std::string> modes{"plain"};
    if (o_.cuda_graph) {
      if (auto why = exe->use_graph_replay(true)) {
        const std::string note = fmt::format("{}: --cuda-graph: {}", name, *why);
        if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
      } else {
        exe->use_graph_replay(false);
        modes.push_back("graph");
      }
    }
    std::vector<Scope> scopes{Scope::Compute};
    if (!o_.no_data_transfers) scopes.push_back(Scope::EndToEnd);
    for (const auto& mode : modes) {
      exe->use_graph_replay(mode == "graph");
      const size_t before = results_.size();
      try {
        for (Scope scope : scopes) {
          spdlog::info("{}: batch {}: {}{}", name, n, mode == "graph" ? "graph replay, " : "", scope_text(scope));
          bench_case(*exe, name, n, mode, scope, input);
          results_.back().outputs_finite = finite;
        }
      } catch (const std::exception& e) {
        results_.resize(before);
        try {
          exe->use_graph_replay(false);
          exe->staged_execution()->synchronize();
        } catch (const std::exception&) {
          // A sticky device error: the next batch's compile reports it again.
        }
        const std::string why = mode == "graph" ? fmt::format("not graph-capturable: {}", e.what()) : e.what();
        skipped_.push_back(Skip{name, n, mode + ": " + why});
        notes_.push_back(fmt::format("{}: batch {}: {} mode skipped: {}", name, n, mode, why));
        spdlog::warn("{}: batch {}: {} mode skipped: {}", name, n, mode, why);
        if (mode == "plain") break;  // no graph mode either; on to the next batch
        continue;
      }
      print_case_block(name, n, mode);
    }
    if (!o_.no_data_transfers && exe->overlaps_batches()) {
      // End to end over a stream of batches, uploads overlapping compute (graph replay when on).
      try {
        prepare_stream(*exe, n, input.data());
        exe->use_graph_replay(std::find(modes.begin(), modes.end(), "graph") != modes.end());
        spdlog::info("{}: batch {}: pipelined, {} batches streamed", name, n, kStreamBatches);
        bench_case(*exe, name, n, "pipelined", Scope::EndToEnd, input);
        results_.back().outputs_finite = finite;
        print_case_block(name, n, "pipelined");
      } catch (const std::exception& e) {
        skipped_.push_back(Skip{name, n, std::string("pipelined: ") + e.what()});
        spdlog::warn("{}: batch {}: pipelined mode skipped: {}", name, n, e.what());
      }
      pipelined_ = false;
      exe->use_graph_replay(false);
    }
    if (devices_.size() > 1) {
      exe.reset();  // its memory back before one executable per GPU is made
      bench_split(backend, name, n);
    }
    // After each batch: a run cut short (a time limit) still leaves what it measured.
    if (!o_.json_path.empty()) write_json_file(o_.json_path, to_json());
  }
  if (o_.profile && !batches.empty()) {
    // Default: the largest batch whose compute-only median latency stayed within 50 ms, so the
    // profile (one executable per cut, each timed a while) stays short.
    int n = o_.profile_batch;
    if (n <= 0) {
      int fast = 0, smallest = 0;
      for (const auto& r : results_) {
        if (r.backend != name || r.scope != Scope::Compute || r.mode != "plain") continue;
        if (smallest == 0 || r.batch < smallest) smallest = r.batch;
        if (r.latency.median <= 50 && r.batch > fast) fast = r.batch;
      }
      n = fast > 0 ? fast : smallest > 0 ? smallest : batches.front();
    }
    try {
      profile(backend, name, n);
    } catch (const std::exception& e) {
      notes_.push_back(fmt::format("{}: --profile failed: {}", name, e.what()));
      spdlog::warn("{}: --profile failed: {}", name, e.what());
    }
  }
}

// Per-layer times from a separate run, so the headline numbers are not disturbed. The backends are
// driven only through the public interface: node k's time is the compute time of the graph cut
// after node k minus that of the graph cut before it (each cut compiled as its own executable,
// its last values as outputs). Fusion across a cut is lost, so a fused activation shows near zero
// (or below: the cut made its producer write a value the fused plan never writes).
void ModelBench::profile(Backend& backend, const std::string& name, int n) {
  spdlog::info("{}: profiling per layer at batch {}", name, n);
  const auto& model = *graph_->model;
  const double budget_ms = std::max(100.0, o_.duration_s * 200.0);

  enum class Part { Upload, Compute, Download };
  // Fastest run of one part of the pipeline alone, over at least 5 runs and about `budget_ms`: the
  // minimum, least disturbed by other work on the machine, suits differences between cuts.
  auto time_part = [&](Executable& exe, const InputData& input, Part part) {
    StagedExecution& st = staged(exe);
    for (auto& tp : tp_) tp = st.make_time_point();
    st.stage_input(input.data(), n);
    st.compute(n);
    st.synchronize();
    std::vector<double> samples;
    const auto t0 = Clock::now();
    while (samples.size() < 5 || (ms_between(t0, Clock::now()) < budget_ms && samples.size() < 100000)) {
      tp_[0]->record();
      switch (part) {
        case Part::Upload:
          st.stage_input(input.data(), n);
          break;
        case Part::Compute:
          st.compute(n);
          break;
        case Part::Download:
          st.fetch_outputs(n);
          break;
      }
      tp_[1]->record();
      samples.push_back(tp_[1]->ms_since(*tp_[0]));
    }
    st.synchronize();
    return *std::min_element(samples.begin(), samples.end());
  };

  CompileOptions copts;
  copts.max_batch = n;
  copts.fuse = !o_.no_fuse;
  copts.deterministic = !o_.nondeterministic;
  copts.precision = parse_precision(o_.precision).value_or(Precision::FP32);
  copts.threads = o_.threads;
  std::vector<double> cumulative(model.nodes.size(), 0.0);
  double previous = 0;
  for (size_t k = 0; k < model.nodes.size(); ++k) {
    if (model.nodes[k].op == OpType::Flatten) {  // an alias: no work, and no cut ends there
      cumulative[k] = previous;
      continue;
    }
    auto cut = std::make_shared<formats::Model>(model);
    cut->nodes.resize(k + 1);
    cut->outputs.clear();
    std::vector<bool> read(k + 1, false);
    for (size_t j = 0; j <= k; ++j)
      for (const auto& in : cut->nodes[j].inputs)
        for (size_t i = 0; i < j; ++i)
          if (cut->nodes[i].name == in) read[i] = true;
    for (size_t j = 0; j <= k; ++j)
      if (!read[j]) cut->outputs.push_back(cut->nodes[j].name);
    const Graph g = plan_graph(cut);
    auto exe = backend.compile(g, copts);
    const InputData input(*exe, model.input, n);
    cumulative[k] = time_part(*exe, input, Part::Compute);
    previous = cumulative[k];
  }
  auto full = backend.compile(*graph_, copts);
  const InputData input(*full, model.input, n);
  const bool on_device = staged(*full).input_staging() != nullptr;
  const double upload = on_device ? time_part(*full, input, Part::Upload) : 0;
  const double download = on_device ? time_part(*full, input, Part::Download) : 0;
  const double whole = time_part(*full, input, Part::Compute);

  Json layers = Json::array();
  Table table({"layer", "op", "ms", "share", "GFLOP/s", "GB/s", "cumulative ms"});
  double sum = 0;
  std::vector<double> deltas;
  for (size_t k = 0; k < model.nodes.size(); ++k) {
    const double d = cumulative[k] - (k ? cumulative[k - 1] : 0.0);
    deltas.push_back(d);
    sum += std::max(0.0, d);
  }
  auto add_row = [&](const std::string& layer, const std::string& op, double ms, double flops, double bytes,
                     double cum) {
    const double share = sum > 0 ? 100.0 * std::max(0.0, ms) / sum : 0;
    const double gflops = ms > 0 && flops > 0 ? flops / (ms * 1e-3) / 1e9 : 0;
    const double gbps = ms > 0 && bytes > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
    table.add({layer, op, ms_text(ms), cum >= 0 ? fmt::format("{:.1f}%", share) : "-",
               gflops > 0 ? fmt::format("{:.1f}", gflops) : "-", gbps > 0 ? fmt::format("{:.1f}", gbps) : "-",
               cum >= 0 ? ms_text(cum) : ""});
    layers.push_back(Json{{"layer", layer},
                          {"op", op},
                          {"ms", ms},
                          {"share_pct", cum >= 0 ? share : 0.0},
                          {"flops", flops},
                          {"bytes", bytes},
                          {"gflops", gflops},
                          {"gbps", gbps}});
  };
  if (on_device) add_row("(upload + preprocess)", "h2d", upload, 0, cost_.raw_input_bytes * n, -1);
  for (size_t k = 0; k < model.nodes.size(); ++k) {
    const NodeCost& c = cost_.nodes[k];
    add_row(c.name, c.op, deltas[k], c.flops * n, c.bytes * n + c.weight_bytes, cumulative[k]);
  }
  if (on_device) add_row("(download)", "d2h", download, 0, cost_.output_bytes * n, -1);
  fmt::print("\n== per-layer profile: {} | batch {} (separate run; cut-difference method) ==\n{}", name, n,
             table.render());
  fmt::print("  sum of layers {} ms, whole graph {} ms in the same profiling run; shares are of the layers' sum.\n",
             ms_text(sum), ms_text(whole));
  profiles_.push_back(Json{{"backend", name},
                           {"batch", n},
                           {"method",
                            "cut differences: fastest compute time of the graph cut after each node minus the "
                            "cut before it; fusion across a cut is lost"},
                           {"whole_graph_ms", whole},
                           {"layers", layers}});
}

std::string rate_text(double images_per_s) { return si(images_per_s) + " images/s"; }

void ModelBench::print_case_block(const std::string& backend, int n, const std::string& mode) const {
  const CaseResult* scopes[2] = {nullptr, nullptr};
  for (const auto& r : results_)
    if (r.backend == backend && r.batch == n && r.mode == mode) scopes[r.scope == Scope::Compute ? 0 : 1] = &r;
  const char* unit_gpu = scopes[0] && scopes[0]->on_device ? "GPU" : "CPU";
  const CaseResult* any = scopes[0] ? scopes[0] : scopes[1];
  fmt::print("\n=== {} | batch {} | {} ===\n", backend, n,
             mode == "graph"       ? "compute replayed as a CUDA graph"
             : mode == "pipelined" ? fmt::format("{} batches streamed, uploads overlapping compute", kStreamBatches)
                                   : (any && any->on_device ? "plain launches on one stream" : "on the host"));
  for (const CaseResult* r : scopes) {
    if (!r) continue;
    const std::string share = r->ceiling > 0 ? fmt::format(", {:.3g}% of the {} ceiling ({})", 100 * r->fraction,
                                                           r->scope == Scope::Compute ? "compute" : "e2e", si(r->ceiling))
                                             : std::string(", no ceiling for this precision here");
    fmt::print("{:<20}{} (wall {}){}\n", r->scope == Scope::Compute ? "Throughput compute" : "Throughput e2e",
               rate_text(r->images_per_s), si(r->wall_images_per_s), share);
  }
  if (const CaseResult* r = scopes[1]) {
    fmt::print("{:<20}{} ms\n", "Latency e2e", stats_line(r->latency, 4));
    if (r->on_device) {
      fmt::print("{:<20}{} ms\n", "  H2D + preprocess", stats_line(r->h2d, 4));
      fmt::print("{:<20}{} ms\n", fmt::format("  {} compute", unit_gpu), stats_line(r->compute, 4));
      fmt::print("{:<20}{} ms\n", "  D2H", stats_line(r->d2h, 4));
    }
  }
  if (const CaseResult* r = scopes[0]) {
    fmt::print("{:<20}{} ms\n", "Latency compute", stats_line(r->latency, 4));
    if (r->on_device)
      fmt::print("{:<20}median {} ms per iteration (host time to enqueue compute)\n", "Enqueue",
                 ms_text(r->enqueue.median));
  }
  for (const CaseResult* r : scopes) {
    if (!r) continue;
    fmt::print("{:<20}{}: {} x, {} ± {} images/s ({:.2f}%{}), iterations {}\n", "Repetitions", scope_text(r->scope),
               r->reps.size(), si(r->rep_mean), si(r->rep_sd), r->spread_pct,
               r->spread_pct > 2 ? ": spread over 2%, noisy" : "", [&] {
                 std::string s;
                 for (const auto& rr : r->reps) s += (s.empty() ? "" : ",") + std::to_string(rr.iterations);
                 return s;
               }());
  }
  std::fflush(stdout);
}

void ModelBench::derive_hints() {
  for (const auto& r : results_) {
    if (!r.on_device) continue;
    const std::string where = fmt::format("{} batch {}", r.backend, r.batch);
    if (r.scope == Scope::Compute && r.mode == "plain" && r.enqueue.median >= 0.5 * r.latency.median) {
      std::string h = fmt::format("{}: launch-bound (the host needs {} ms to enqueue {} ms of GPU compute)", where,
                                  ms_text(r.enqueue.median), ms_text(r.latency.median));
      const CaseResult* g = nullptr;
      for (const auto& q : results_)
        if (q.backend == r.backend && q.batch == r.batch && q.scope == r.scope && q.mode == "graph") g = &q;
      if (g)
        h += fmt::format(": CUDA graph replay gives {} ms ({:.2f}x)", ms_text(g->latency.median),
                         r.latency.median / g->latency.median);
      else if (!o_.cuda_graph)
        h += ": try --cuda-graph";
      hints_.push_back(h);
    }
    if (r.scope == Scope::EndToEnd && r.h2d.median + r.d2h.median >= r.compute.median)
      hints_.push_back(
          fmt::format("{} ({}): transfers ({} + {} ms) >= compute ({} ms): the end-to-end number measures "
                      "the host link; look at the compute-only scope (--no-data-transfers)",
                      where, r.mode, ms_text(r.h2d.median), ms_text(r.d2h.median), ms_text(r.compute.median)));
  }
  for (const auto& r : results_)
    if (r.spread_pct > 2)
      hints_.push_back(
          fmt::format("{} batch {} {} {}: repetitions spread {:.1f}% (> 2%): raise --duration or "
                      "--repetitions, or quiet the machine",
                      r.backend, r.batch, r.mode, scope_key(r.scope), r.spread_pct));
}

void ModelBench::print_overview() const {
  std::vector<std::string> header{"backend", "batch", "mode", "scope", "images/s", "±%", "median ms"};
  for (double p : o_.percentiles) header.push_back(fmt::format("p{:g} ms", p));
  header.insert(header.end(), {"max ms", "% ceiling"});
  Table t(header);
  for (const auto& r : results_) {
    std::vector<std::string> row{r.backend,
                                 std::to_string(r.batch),
                                 r.mode,
                                 scope_key(r.scope),
                                 si(r.images_per_s),
                                 fmt::format("{:.1f}", r.spread_pct),
                                 ms_text(r.latency.median)};
    for (double p : o_.percentiles) row.push_back(ms_text(r.latency.percentile(p)));
    row.push_back(ms_text(r.latency.max));
    row.push_back(r.ceiling > 0 ? fmt::format("{:.3g}", 100 * r.fraction) : "-");
    t.add(row);
  }
  fmt::print("\n== summary: {} ({}), images/s = batch / median latency, ±% = sd of the repetitions ==\n{}",
             graph_->model->name, o_.model, t.render());
  if (!skipped_.empty()) {
    fmt::print("\nskipped\n");
    for (const auto& s : skipped_)
      fmt::print("  {}{}: {}\n", s.backend, s.batch ? fmt::format(" batch {}", s.batch) : "", s.reason);
  }
  if (notes_.size() > header_notes_) {
    fmt::print("\nnotes\n");
    for (size_t i = header_notes_; i < notes_.size(); ++i) fmt::print("  {}\n", notes_[i]);
  }
  if (!hints_.empty()) {
    fmt::print("\nhints\n");
    for (const auto& h : hints_) fmt::print("  - {}\n", h);
  }
}

Json ModelBench::to_json() const {
  Json j;
  j["schema"] = "cnn-engine-bench/1";
  j["tool"] = "engine bench";
  j["command"] = o_.command_line;
  j["precision"] = o_.precision;
  j["git_commit"] = git_commit();
  j["timestamp"] = timestamp_utc();
  j["complete"] = complete_;
  const auto& m = *graph_->model;
  Json layers = Json::array();
  for (const auto& c : cost_.nodes)
    layers.push_back(Json{{"name", c.name},
                          {"op", c.op},
                          {"multiply_adds", c.multiply_adds},
                          {"flops", c.flops},
                          {"bytes", c.bytes},
                          {"weight_bytes", c.weight_bytes}});
  j["model"] = Json{{"name", m.name},
                    {"path", o_.model},
                    {"parameters", m.parameter_count()},
                    {"multiply_adds_per_image", cost_.multiply_adds},
                    {"flops_per_image", cost_.flops},
                    {"raw_input_bytes", cost_.raw_input_bytes},
                    {"input_value_bytes", cost_.input_value_bytes},
                    {"output_bytes", cost_.output_bytes},
                    {"weight_bytes", cost_.weight_bytes},
                    {"min_device_bytes_per_image_compute", cost_.device_bytes_compute()},
                    {"min_device_bytes_per_image_e2e", cost_.device_bytes_e2e()},
                    {"min_link_bytes_per_image", cost_.link_bytes()},
                    {"layers", layers}};
  j["device"] = device_json(device_);
  j["host"] = host_json(host_);
  Json ceilings = Json::array();
  for (int n : o_.batches) {
    const Ceiling d = ceiling(true, n), h = ceiling(false, n);
    ceilings.push_back(Json{{"batch", n},
                            {"device_compute_images_per_s", d.compute},
                            {"device_e2e_images_per_s", d.e2e},
                            {"host_images_per_s", h.compute}});
  }
  j["ceilings"] = ceilings;
  j["settings"] = Json{{"backends", o_.backends},
                       {"batches", o_.batches},
                       {"warmup_ms", o_.warmup_ms},
                       {"iterations", o_.iterations},
                       {"duration_s", o_.duration_s},
                       {"repetitions", o_.repetitions},
                       {"percentiles", o_.percentiles},
                       {"cuda_graph", o_.cuda_graph},
                       {"no_data_transfers", o_.no_data_transfers},
                       {"profile", o_.profile},
                       {"max_cpu_batch", o_.max_cpu_batch},
                       {"threads", o_.threads},
                       {"devices", devices_}};
  Json results = Json::array();
  for (const auto& r : results_) {
    Json e{{"backend", r.backend},
           {"batch", r.batch},
           {"scope", scope_key(r.scope)},
           {"mode", r.mode},
           {"device", r.on_device ? "gpu" : "cpu"},
           {"images_per_s", r.images_per_s},
           {"wall_images_per_s", r.wall_images_per_s},
           {"images_per_s_mean", r.rep_mean},
           {"images_per_s_sd", r.rep_sd},
           {"spread_pct", r.spread_pct},
           {"ceiling_images_per_s", r.ceiling},
           {"fraction_of_ceiling", r.fraction},
           {"outputs_finite", r.outputs_finite},
           {"latency_ms", stats_json(r.latency)},
           {"enqueue_ms", stats_json(r.enqueue)}};
    if (r.scope == Scope::EndToEnd) {
      e["h2d_ms"] = stats_json(r.h2d);
      e["compute_ms"] = stats_json(r.compute);
      e["d2h_ms"] = stats_json(r.d2h);
    }
    Json reps = Json::array();
    for (const auto& rr : r.reps)
      reps.push_back(Json{{"iterations", rr.iterations},
                          {"seconds", rr.seconds},
                          {"images_per_s", rr.images_per_s},
                          {"wall_images_per_s", rr.wall_images_per_s},
                          {"latency_ms", stats_json(rr.latency)}});
    e["repetitions"] = reps;
    results.push_back(std::move(e));
  }
  j["results"] = results;
  Json skipped = Json::array();
  for (const auto& s : skipped_)
    skipped.push_back(Json{{"backend", s.backend}, {"batch", s.batch}, {"reason", s.reason}});
  j["skipped"] = skipped;
  j["profiles"] = profiles_;
  Json multi = Json::array();
  for (const auto& c : multi_) multi.push_back(multi_case_json(c));
  j["multi_device"] = multi;
  j["notes"] = notes_;
  j["hints"] = hints_;
  return j;
}

int ModelBench::run() {
  check_options();
  const auto backends = pick_backends();
  model_ = std::make_shared<const formats::Model>(formats::load_model(o_.model));
  formats::require_weights(*model_);  // an architecture-only graph has nothing to run
  graph_.emplace(plan_graph(model_));
  cost_ = model_cost(*graph_);

  spdlog::info("measuring the host and device ceilings");
  host_ = probe_host();
  device_ = probe_device(true);

  const auto& m = *model_;
  fmt::print("engine bench: model {} ({}), {} parameters, git {}\n", m.name, o_.model, thousands(m.parameter_count()),
             git_commit());
  fmt::print(
      "work per image  {} multiply-adds = {:.4g} MFLOP; fewest bytes: {} B through device memory in the compute "
      "scope ({} B input value + {} B outputs), {} B over the host link ({} B raw input + {} B outputs); "
      "{} B of weights per batch\n",
      thousands(cost_.multiply_adds), cost_.flops / 1e6, cost_.device_bytes_compute(), cost_.input_value_bytes,
      cost_.output_bytes, cost_.link_bytes(), cost_.raw_input_bytes, cost_.output_bytes,
      thousands(int64_t(cost_.weight_bytes)));
  fmt::print("device          {}\n", describe_device(device_));
  fmt::print("host            {}\n", describe_host(host_));
  if (device_.available && device_.fma_tflops > 0) {
    const double arithmetic = cost_.flops / (device_.fma_tflops * 1e12);
    const double memory = cost_.device_bytes_compute() / (device_.copy_gbps * 1e9);
    const double link =
        cost_.raw_input_bytes / (device_.h2d_gbps * 1e9) + cost_.output_bytes / (device_.d2h_gbps * 1e9);
    fmt::print(
        "GPU ceiling     compute scope {} images/s ({}-bound: {:.3g} ns arithmetic vs {:.3g} ns memory per "
        "image); end to end {} images/s serial (link {:.3g} ns per image), {} pipelined\n",
        si(1 / std::max(arithmetic, memory)), arithmetic >= memory ? "arithmetic" : "memory", arithmetic * 1e9,
        memory * 1e9, si(1 / (std::max(arithmetic, memory) + link)), link * 1e9,
        si(1 / std::max({arithmetic, memory, link})));
    if (parse_precision(o_.precision).value_or(Precision::FP32) != Precision::FP32)
      fmt::print("                (fp32 arithmetic; --precision {} runs on tensor cores, whose rate is not measured "
                 "here: the ceilings below are the memory time alone)\n",
                 o_.precision);
  }
  fmt::print("CPU ceiling     {} images/s ({} threads at the measured fp32 FMA peak)\n",
             si(1 / (cost_.flops / (host_fma_gflops() * 1e9))), o_.threads > 0 && o_.threads < host_.threads ? o_.threads : host_.threads);
  fmt::print(
      "settings        warm-up {} ms; per repetition at least {} iterations and {} s; {} repetitions; "
      "percentiles {}; every iteration synchronised (latency)\n",
      o_.warmup_ms, o_.iterations, o_.duration_s, o_.repetitions, [&] {
        std::string s;
        for (double p : o_.percentiles) s += (s.empty() ? "" : ",") + fmt::format("{:g}", p);
        return s;
      }());
  for (const auto& note : notes_) fmt::print("note            {}\n", note);
  header_notes_ = notes_.size();
  std::fflush(stdout);

  const auto& registry = BackendRegistry::instance();
  for (const auto& name : backends) {
    auto backend = registry.create(name);
    spdlog::info("backend {}: {}", name, backend->description());
    bench_backend(name, *backend);
  }
  derive_hints();
  complete_ = true;
  print_overview();
  if (!o_.json_path.empty()) {
    write_json_file(o_.json_path, to_json());
    spdlog::info("wrote {}", o_.json_path);
  }
  if (results_.empty()) {
    spdlog::error("nothing was measured (see skipped)");
    return 1;
  }
  return 0;
}

}  // namespace

int run_model_bench(const ModelBenchOptions& options) { return ModelBench(options).run(); }

}  // namespace engine::bench

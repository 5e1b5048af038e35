// engine bench ops: the seeds' Part 1 study. n x n float32 matrix add (n^2 flops) and multiply
// (2 n^3 flops) on the CPU (one thread, all threads) and on the GPU (the custom backend's naive
// kernel, rows over blocks and columns over threads; its shared-memory tiled kernel; cuBLAS), with
// and without host <-> device transfers; a sweep of launch shapes (gridDim = 1 included); the
// operation counts and ideal times beside the measured ones; and the size from which the GPU wins.
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>

#include "engine/bench/bench.hpp"
#include "engine/bench/common.hpp"
#include "engine/bench/ops_gpu.hpp"

namespace engine::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Row {
  std::string op;
  int n = 0;
  std::string impl;    // cpu-1t, cpu-Nt, naive, tiled, cublas
  std::string launch;  // "8 threads", "grid 1000 x block 1024", ...
  Launch3 grid, block;
  int threads = 0;  // CPU
  bool transfers = false;
  bool sweep = false;
  Stats ms;
  int iterations = 0;
  double flops = 0, bytes = 0, link_bytes = 0;
  double ideal_ms = 0;   // GPU: max(flops / FMA rate, bytes / copy bandwidth) [+ link time]
  double rel_error = 0;  // ||c - ref|| / ||ref|| over the checked rows
  int checked_rows = 0;
  bool all_written = true;
  std::string skipped;      // why not measured (then ms is empty)
  double predicted_ms = 0;  // CPU rows skipped: the extrapolated time
};

double flops_of(const std::string& op, double n) { return op == "add" ? n * n : 2 * n * n * n; }
double bytes_of(double n) { return 3 * n * n * 4; }       // a and b read, c written
double link_bytes_of(double n) { return 3 * n * n * 4; }  // a and b up, c down

void cpu_add(const float* a, const float* b, float* c, int n, int threads) {
  const int64_t count = int64_t(n) * n;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < count; ++i) c[i] = a[i] + b[i];
}

// i-k-j order: the inner loop streams a row of b and of c (vectorised); float accumulation.
void cpu_matmul(const float* a, const float* b, float* c, int n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int i = 0; i < n; ++i) {
    float* crow = c + int64_t(i) * n;
    std::fill(crow, crow + n, 0.0f);
    for (int p = 0; p < n; ++p) {
      const float aip = a[int64_t(i) * n + p];
      const float* brow = b + int64_t(p) * n;
      for (int j = 0; j < n; ++j) crow[j] += aip * brow[j];
    }
  }
}

// Reference rows in double: every row up to n = 1024, else 64 rows (add) or 16 rows (matmul)
// spread over the matrix, first and last included. check() also scans the whole output for NaN,
// the poison of an unwritten element.
struct Reference {
  std::vector<int> rows;
  std::vector<double> values;  // rows.size() x n
};

Reference make_reference(const std::string& op, int n, const std::vector<float>& a, const std::vector<float>& b) {
  Reference r;
  const int count = n <= 1024 ? n : (op == "add" ? 64 : 16);
  for (int i = 0; i < count; ++i) r.rows.push_back(count == n ? i : int(int64_t(i) * (n - 1) / (count - 1)));
  r.values.assign(size_t(r.rows.size()) * size_t(n), 0.0);
  for (size_t k = 0; k < r.rows.size(); ++k) {
    const int64_t i = r.rows[k];
    double* out = r.values.data() + k * size_t(n);
    if (op == "add") {
      for (int j = 0; j < n; ++j) out[j] = double(a[size_t(i * n + j)]) + double(b[size_t(i * n + j)]);
    } else {
      for (int p = 0; p < n; ++p) {
        const double aip = a[size_t(i * n + p)];
        const float* brow = b.data() + int64_t(p) * n;
        for (int j = 0; j < n; ++j) out[j] += aip * double(brow[j]);
      }
    }
  }
  return r;
}

void check(Row& row, const Reference& ref, const std::vector<float>& c, int n) {
  double diff = 0, norm = 0;
  for (size_t k = 0; k < ref.rows.size(); ++k)
    for (int j = 0; j < n; ++j) {
      const double want = ref.values[k * size_t(n) + size_t(j)];
      const double got = c[size_t(ref.rows[k]) * size_t(n) + size_t(j)];
      diff += (got - want) * (got - want);
      norm += want * want;
    }
  row.rel_error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  row.checked_rows = int(ref.rows.size());
  for (float v : c)
    if (std::isnan(v)) {
      row.all_written = false;
      break;
    }
  if (!std::isfinite(row.rel_error)) row.all_written = false;
}

std::string launch_text(Launch3 g, Launch3 b) {
  auto d = [](Launch3 v) {
    if (v.y == 1 && v.z == 1) return fmt::format("{}", v.x);
    return v.z == 1 ? fmt::format("{}x{}", v.x, v.y) : fmt::format("{}x{}x{}", v.x, v.y, v.z);
  };
  return fmt::format("grid {} x block {}", d(g), d(b));
}

class OpsBench {
 public:
  explicit OpsBench(const OpsBenchOptions& o) : o_(o) {}
  int run();

 private:
  void bench_op(const std::string& op);
  void cpu_rows(const std::string& op, int n, const std::vector<float>& a, const std::vector<float>& b,
                const Reference& ref, std::map<int, std::pair<int, double>>& last);
  void gpu_rows(const std::string& op, int n, const Reference& ref);
  void sweep(const std::string& op, int n);
  Row base_row(const std::string& op, int n, const std::string& impl) const;
  void fill_rates(Row& r) const;
  Json crossover(const std::string& op, bool transfers, std::string& text) const;
  void print_op(const std::string& op) const;
  Json to_json() const;

  const OpsBenchOptions& o_;
  HostInfo host_;
  DeviceInfo device_;
  std::unique_ptr<GpuOps> gpu_;
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
  Json crossovers_ = Json::object();
};

std::vector<int> default_sizes(const std::string& op) {
  return op == "add" ? std::vector<int>{100, 300, 1000, 3000, 10000} : std::vector<int>{100, 300, 1000, 3000};
}

Row OpsBench::base_row(const std::string& op, int n, const std::string& impl) const {
  Row r;
  r.op = op;
  r.n = n;
  r.impl = impl;
  r.flops = flops_of(op, n);
  r.bytes = bytes_of(n);
  r.link_bytes = link_bytes_of(n);
  return r;
}

void OpsBench::fill_rates(Row& r) const {
  if (r.impl.rfind("cpu", 0) != 0 && device_.fma_tflops > 0) {
    r.ideal_ms = std::max(r.flops / (device_.fma_tflops * 1e12), r.bytes / (device_.copy_gbps * 1e9)) * 1e3;
    if (r.transfers)
      r.ideal_ms +=
          (2.0 / 3 * r.link_bytes / (device_.h2d_gbps * 1e9) + 1.0 / 3 * r.link_bytes / (device_.d2h_gbps * 1e9)) * 1e3;
  } else if (r.impl.rfind("cpu", 0) == 0) {
    const double rate = r.threads > 1 ? host_.fma_gflops_all : host_.fma_gflops_one;
    const double bw = r.threads > 1 ? host_.copy_gbps_all : host_.copy_gbps_one;
    if (rate > 0 && bw > 0) r.ideal_ms = std::max(r.flops / (rate * 1e9), r.bytes / (bw * 1e9)) * 1e3;
  }
}

void OpsBench::cpu_rows(const std::string& op, int n, const std::vector<float>& a, const std::vector<float>& b,
                        const Reference& ref, std::map<int, std::pair<int, double>>& last) {
  const double power = op == "add" ? 2 : 3;
  std::vector<int> thread_counts{1};
  if (host_.threads > 1) thread_counts.push_back(host_.threads);
  std::vector<float> c;
  for (int threads : thread_counts) {
    Row r = base_row(op, n, threads == 1 ? "cpu-1t" : fmt::format("cpu-{}t", threads));
    r.threads = threads;
    r.launch = fmt::format("{} thread{}", threads, threads == 1 ? "" : "s");
    fill_rates(r);
    // Predict from the previous size measured with the same thread count.
    if (auto prev = last.find(threads); prev != last.end()) {
      const auto [prev_n, prev_ms] = prev->second;
      const double predicted = prev_ms * std::pow(double(n) / prev_n, power);
      if (predicted > o_.cpu_limit_s * 1e3) {
        r.skipped = fmt::format("predicted {:.1f} s per run > --cpu-limit {} s", predicted / 1e3, o_.cpu_limit_s);
        r.predicted_ms = predicted;
        rows_.push_back(r);
        continue;
      }
    }
    spdlog::info("ops {} n={} on the CPU, {} thread(s)", op, n, threads);
    c.assign(size_t(n) * size_t(n), std::numeric_limits<float>::quiet_NaN());
    std::vector<double> samples;
    const auto t0 = Clock::now();
    for (;;) {
      const auto s = Clock::now();
      if (op == "add")
        cpu_add(a.data(), b.data(), c.data(), n, threads);
      else
        cpu_matmul(a.data(), b.data(), c.data(), n, threads);
      samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
      const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (elapsed >= o_.min_time_ms && (int(samples.size()) >= o_.min_iterations || elapsed >= 2000)) break;
    }
    r.ms = summarize(samples, {90});
    r.iterations = int(samples.size());
    check(r, ref, c, n);
    last[threads] = {n, r.ms.median};
    rows_.push_back(r);
  }
}

void OpsBench::gpu_rows(const std::string& op, int n, const Reference& ref) {
  const unsigned cols_threads = unsigned(std::min(1024, (n + 31) / 32 * 32));
  struct Variant {
    std::string impl;
    Launch3 grid, block;
  };
  const std::vector<Variant> variants{
      {"naive", Launch3{unsigned(n), 1, 1}, Launch3{cols_threads, 1, 1}},  // rows as blocks, columns as threads
      {"tiled", Launch3{0, 0, 1}, Launch3{}},
      {"cublas", Launch3{}, Launch3{}},
  };
  for (const auto& v : variants)
    for (bool transfers : {false, true}) {
      Row r = base_row(op, n, v.impl);
      r.transfers = transfers;
      r.grid = v.grid;
      r.block = v.block;
      if (v.impl == "naive")
        r.launch = launch_text(v.grid, v.block) + " (rows over blocks, columns over threads)";
      else if (v.impl == "tiled")
        r.launch = launch_text(gpu_->tiled_grid(), gpu_->tiled_block()) + " (covering)";
      else
        r.launch = op == "add" ? "cublasSgeam" : "cublasSgemm (fp32, no TF32)";
      fill_rates(r);
      spdlog::info("ops {} n={} {}{}", op, n, v.impl, transfers ? " with transfers" : "");
      try {
        GpuOpRun run = gpu_->time(v.impl, v.grid, v.block, transfers, o_.min_time_ms, o_.min_iterations);
        r.ms = run.ms;
        r.iterations = run.iterations;
        check(r, ref, run.c, n);
      } catch (const std::exception& e) {
        r.skipped = e.what();
      }
      rows_.push_back(r);
    }
}

void OpsBench::sweep(const std::string& op, int n) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(size_t(n) * size_t(n)), b(a.size());
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng);
  const Reference ref = make_reference(op, n, a, b);
  gpu_->prepare(op, n, a.data(), b.data());
  const unsigned sms = unsigned(gpu_->multiprocessors());
  std::vector<Launch3> grids{{1, 1, 1}, {sms, 1, 1}, {4 * sms, 1, 1}, {unsigned(n), 1, 1}};
  std::vector<Launch3> blocks{{32, 1, 1}, {128, 1, 1}, {256, 1, 1}, {1024, 1, 1}, {32, 8, 1}};
  const double k = op == "add" ? 1 : n;
  // A thread runs ceil(rows / blocks) * ceil(cols / threads) outputs of k steps each, one after the
  // other; shapes that would keep one thread busy for that many steps take seconds: skipped.
  constexpr double kMaxSerialSteps = 4e6;
  auto serial_steps = [&](Launch3 g, Launch3 bl) {
    const double blocks_n = double(g.x) * g.y * g.z, threads = double(bl.x) * bl.y * bl.z;
    return std::ceil(n / blocks_n) * std::ceil(n / threads) * k;
  };
  auto measure = [&](Row r) {
    fill_rates(r);
    spdlog::info("ops {} n={} sweep: {} {}", op, n, r.impl, r.launch);
    try {
      GpuOpRun run = gpu_->time(r.impl, r.grid, r.block, false, o_.min_time_ms, o_.min_iterations);
      r.ms = run.ms;
      r.iterations = run.iterations;
      check(r, ref, run.c, n);
    } catch (const std::exception& e) {
      r.skipped = e.what();
    }
    rows_.push_back(r);
  };
  for (const auto& g : grids)
    for (const auto& bl : blocks) {
      Row r = base_row(op, n, "naive");
      r.sweep = true;
      r.grid = g;
      r.block = bl;
      r.launch = launch_text(g, bl);
      const double steps = serial_steps(g, bl);
      if (steps > kMaxSerialSteps) {
        r.skipped =
            fmt::format("{:.2g} dependent steps per thread (> {:.0g}): would take seconds", steps, kMaxSerialSteps);
        rows_.push_back(r);
        continue;
      }
      measure(r);
    }
  const Launch3 cover = gpu_->tiled_grid();
  const double tile = op == "add" ? 32 : 16;
  for (const Launch3& g : std::vector<Launch3>{{1, 1, 1}, {sms, 1, 1}, cover}) {
    Row r = base_row(op, n, "tiled");
    r.sweep = true;
    r.grid = g;
    r.block = gpu_->tiled_block();
    r.launch = launch_text(g, r.block) + (g.x == cover.x && g.y == cover.y ? " (covering)" : "");
    const double tiles = std::ceil(n / tile) * std::ceil(n / tile);
    const double steps = std::ceil(tiles / (double(g.x) * g.y)) * (op == "add" ? 4 : k);
    if (steps > kMaxSerialSteps) {
      r.skipped =
          fmt::format("{:.2g} dependent steps per thread (> {:.0g}): would take seconds", steps, kMaxSerialSteps);
      rows_.push_back(r);
      continue;
    }
    measure(r);
  }
}

void OpsBench::bench_op(const std::string& op) {
  const std::vector<int> sizes = o_.sizes.empty() ? default_sizes(op) : o_.sizes;
  std::map<int, std::pair<int, double>> last;  // threads -> (n, median ms) of the last size measured
  for (int n : sizes) {
    if (n < 1) throw std::invalid_argument(fmt::format("--n: {} is not a positive size", n));
    std::mt19937 rng{uint32_t(n)};
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(size_t(n) * size_t(n)), b(a.size());
    for (auto& x : a) x = dist(rng);
    for (auto& x : b) x = dist(rng);
    const Reference ref = make_reference(op, n, a, b);
    cpu_rows(op, n, a, b, ref, last);
    if (gpu_) {
      try {
        gpu_->prepare(op, n, a.data(), b.data());
        gpu_rows(op, n, ref);
      } catch (const std::exception& e) {
        notes_.push_back(fmt::format("{} n={}: GPU part failed: {}", op, n, e.what()));
        spdlog::warn("{} n={}: GPU part failed: {}", op, n, e.what());
      }
    }
  }
  if (gpu_) {
    const int n = o_.sweep_n > 0 ? o_.sweep_n : (op == "add" ? 4000 : 1000);
    try {
      sweep(op, n);
    } catch (const std::exception& e) {
      notes_.push_back(fmt::format("{}: launch-shape sweep at n={} failed: {}", op, n, e.what()));
    }
  }
}

// The smallest size from which the best GPU variant beats the best CPU one at every larger size
// measured, with a log-log interpolation of the crossing between the last size the CPU won and the
// first the GPU did.
Json OpsBench::crossover(const std::string& op, bool transfers, std::string& text) const {
  std::map<int, double> cpu, gpu;
  for (const auto& r : rows_) {
    if (r.op != op || r.sweep) continue;
    const bool is_cpu = r.impl.rfind("cpu", 0) == 0;
    double t = r.skipped.empty() ? r.ms.median : (is_cpu && r.predicted_ms > 0 ? r.predicted_ms : kInf);
    if (!r.all_written) t = kInf;
    if (is_cpu) {
      auto [it, fresh] = cpu.emplace(r.n, t);
      if (!fresh) it->second = std::min(it->second, t);
    } else if (r.transfers == transfers) {
      auto [it, fresh] = gpu.emplace(r.n, t);
      if (!fresh) it->second = std::min(it->second, t);
    }
  }
  std::vector<std::tuple<int, double, double>> pts;  // n, cpu, gpu
  for (const auto& [n, c] : cpu)
    if (gpu.count(n) && std::isfinite(gpu[n])) pts.emplace_back(n, c, gpu[n]);
  Json j{{"transfers", transfers}};
  const std::string what = transfers ? "with transfers" : "kernel only";
  if (pts.empty()) {
    text = fmt::format("{}: no GPU measurement", what);
    j["n"] = nullptr;
    return j;
  }
  size_t first_win = pts.size();
  for (size_t i = pts.size(); i-- > 0;) {
    if (std::get<2>(pts[i]) < std::get<1>(pts[i]))
      first_win = i;
    else
      break;
  }
  Json points = Json::array();
  for (const auto& [n, c, g] : pts) points.push_back(Json{{"n", n}, {"cpu_ms", c}, {"gpu_ms", g}});
  j["points"] = points;
  if (first_win == pts.size()) {
    text = fmt::format("{}: the CPU wins at every size measured (up to n = {})", what, std::get<0>(pts.back()));
    j["n"] = nullptr;
  } else if (first_win == 0) {
    text = fmt::format("{}: the GPU wins at every size measured (from n = {})", what, std::get<0>(pts.front()));
    j["n"] = std::get<0>(pts.front());
    j["at_or_below"] = true;
  } else {
    const auto& [n1, c1, g1] = pts[first_win - 1];
    const auto& [n2, c2, g2] = pts[first_win];
    const double l1 = std::log(g1 / c1), l2 = std::log(g2 / c2);
    double est = n2;
    if (std::isfinite(l1) && std::isfinite(l2) && l1 != l2)
      est = std::exp(std::log(double(n1)) + (std::log(double(n2)) - std::log(double(n1))) * (0 - l1) / (l2 - l1));
    text = fmt::format(
        "{}: the GPU wins from n = {} (CPU still ahead at n = {}; crossing near n = {:.0f} by log-log "
        "interpolation)",
        what, n2, n1, est);
    j["n"] = n2;
    j["estimate"] = est;
  }
  return j;
}

void OpsBench::print_op(const std::string& op) const {
  fmt::print("\n== {}: {} on n x n float32; {} flops, at least {} bytes through memory (a, b read, c written) ==\n", op,
             op == "add" ? "c = a + b" : "c = a b", op == "add" ? "n^2" : "2 n^3", "12 n^2");
  Table t({"n", "flops", "bytes", "impl", "launch", "transfers", "median ms", "p90 ms", "GFLOP/s", "GB/s", "ideal ms",
           "rel err"});
  std::vector<std::string> footnotes;
  auto add_row = [&](const Row& r) {
    const std::string transfers = r.impl.rfind("cpu", 0) == 0 ? "-" : (r.transfers ? "yes" : "no");
    if (!r.skipped.empty()) {
      footnotes.push_back(fmt::format("[{}] n={} {}{}: {}", footnotes.size() + 1, r.n, r.impl,
                                      r.transfers ? " with transfers" : "", r.skipped));
      t.add({std::to_string(r.n), fmt::format("{:.3g}", r.flops), fmt::format("{:.3g}", r.bytes), r.impl, r.launch,
             transfers, fmt::format("skipped [{}]", footnotes.size()), "", "", "",
             r.ideal_ms > 0 ? ms_text(r.ideal_ms) : "-", ""});
      return;
    }
    const double s = r.ms.median * 1e-3;
    t.add({std::to_string(r.n), fmt::format("{:.3g}", r.flops), fmt::format("{:.3g}", r.bytes), r.impl, r.launch,
           transfers, ms_text(r.ms.median), ms_text(r.ms.percentile(90)), fmt::format("{:.1f}", r.flops / s / 1e9),
           fmt::format("{:.1f}", r.bytes / s / 1e9), r.ideal_ms > 0 ? ms_text(r.ideal_ms) : "-",
           r.all_written ? fmt::format("{:.1e}", r.rel_error) : "NOT WRITTEN"});
  };
  for (const auto& r : rows_)
    if (r.op == op && !r.sweep) add_row(r);
  fmt::print("{}", t.render());
  for (const auto& f : footnotes) fmt::print("  {}\n", f);
  footnotes.clear();
  bool any_sweep = false;
  Table s({"n", "impl", "launch", "median ms", "GFLOP/s", "GB/s", "vs best", "rel err"});
  double best = kInf;
  for (const auto& r : rows_)
    if (r.op == op && r.sweep && r.skipped.empty() && r.all_written) best = std::min(best, r.ms.median);
  for (const auto& r : rows_) {
    if (r.op != op || !r.sweep) continue;
    any_sweep = true;
    if (!r.skipped.empty()) {
      footnotes.push_back(fmt::format("[{}] {}: {}", footnotes.size() + 1, r.launch, r.skipped));
      s.add({std::to_string(r.n), r.impl, r.launch, fmt::format("skipped [{}]", footnotes.size()), "", "", "", ""});
      continue;
    }
    const double sec = r.ms.median * 1e-3;
    s.add({std::to_string(r.n), r.impl, r.launch, ms_text(r.ms.median), fmt::format("{:.1f}", r.flops / sec / 1e9),
           fmt::format("{:.1f}", r.bytes / sec / 1e9), fmt::format("{:.1f}x", r.ms.median / best),
           r.all_written ? fmt::format("{:.1e}", r.rel_error) : "NOT WRITTEN"});
  }
  if (any_sweep) {
    fmt::print("\nlaunch-shape sweep (kernel only)\n{}", s.render());
    for (const auto& f : footnotes) fmt::print("  {}\n", f);
  }
  if (crossovers_.contains(op)) {
    fmt::print("\nwhere the GPU starts to win (best GPU variant vs best CPU variant, medians)\n");
    for (const auto& line : crossovers_[op]["text"]) fmt::print("  {}\n", line.get<std::string>());
  }
  std::fflush(stdout);
}

Json OpsBench::to_json() const {
  Json j;
  j["schema"] = "cnn-engine-bench-ops/1";
  j["tool"] = "engine bench ops";
  j["command"] = o_.command_line;
  j["git_commit"] = git_commit();
  j["timestamp"] = timestamp_utc();
  j["device"] = device_json(device_);
  j["host"] = host_json(host_);
  j["settings"] = Json{{"ops", o_.ops},
                       {"sizes", o_.sizes},
                       {"sweep_n", o_.sweep_n},
                       {"min_time_ms", o_.min_time_ms},
                       {"min_iterations", o_.min_iterations},
                       {"cpu_limit_s", o_.cpu_limit_s}};
  Json rows = Json::array();
  for (const auto& r : rows_) {
    Json e{{"op", r.op},         {"n", r.n},         {"impl", r.impl},
           {"launch", r.launch}, {"sweep", r.sweep}, {"transfers", r.transfers},
           {"flops", r.flops},   {"bytes", r.bytes}, {"ideal_ms", r.ideal_ms}};
    if (r.impl.rfind("cpu", 0) == 0)
      e["threads"] = r.threads;
    else if (r.impl != "cublas") {
      e["grid"] = {r.grid.x, r.grid.y, r.grid.z};
      e["block"] = {r.block.x, r.block.y, r.block.z};
    }
    if (!r.skipped.empty()) {
      e["skipped"] = r.skipped;
      if (r.predicted_ms > 0) e["predicted_ms"] = r.predicted_ms;
    } else {
      e["ms"] = stats_json(r.ms);
      e["iterations"] = r.iterations;
      e["gflops"] = r.flops / (r.ms.median * 1e-3) / 1e9;
      e["gbps"] = r.bytes / (r.ms.median * 1e-3) / 1e9;
      e["rel_error"] = r.rel_error;
      e["checked_rows"] = r.checked_rows;
      e["all_written"] = r.all_written;
    }
    rows.push_back(std::move(e));
  }
  j["results"] = rows;
  j["crossover"] = crossovers_;
  j["notes"] = notes_;
  return j;
}

int OpsBench::run() {
  for (const auto& op : o_.ops)
    if (op != "add" && op != "matmul")
      throw std::invalid_argument(fmt::format("--op: unknown op '{}' (add, matmul)", op));
  spdlog::info("measuring the host and device ceilings");
  host_ = probe_host();
  const auto why = gpu_ops_unavailable();
  device_ = probe_device(!why);
  if (!why)
    gpu_ = make_gpu_ops();
  else
    notes_.push_back("GPU part not run: " + *why);

  fmt::print("engine bench ops: the seeds' Part 1 study (matrix add and multiply, CPU vs GPU), git {}\n", git_commit());
  fmt::print("device  {}\n", describe_device(device_));
  fmt::print("host    {}\n", describe_host(host_));
  fmt::print(
      "timing  medians over at least {} runs and {} ms after a warm-up run; GPU: CUDA events, every run "
      "synchronised; CPU: steady clock; transfers: a and b from pinned memory, c back\n",
      o_.min_iterations, o_.min_time_ms);
  if (why) fmt::print("note    GPU part not run: {}\n", *why);
  std::fflush(stdout);

  for (const auto& op : o_.ops) {
    bench_op(op);
    Json c{{"text", Json::array()}};
    for (bool transfers : {false, true}) {
      if (!gpu_) break;
      std::string text;
      c[transfers ? "with_transfers" : "kernel_only"] = crossover(op, transfers, text);
      c["text"].push_back(text);
    }
    if (gpu_) crossovers_[op] = c;
    print_op(op);
  }
  for (const auto& n : notes_) fmt::print("note: {}\n", n);
  if (!o_.json_path.empty()) {
    write_json_file(o_.json_path, to_json());
    spdlog::info("wrote {}", o_.json_path);
  }
  return 0;
}

}  // namespace

int run_ops_bench(const OpsBenchOptions& options) { return OpsBench(options).run(); }

}  // namespace engine::bench

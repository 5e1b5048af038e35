#include "engine/bench/common.hpp"

#include "engine/bench/cpu_fma_peak.hpp"
#include "engine/core/host_cpu.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace engine::bench {

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - double(lo));
}

double Stats::percentile(double p) const {
  for (const auto& [q, v] : percentiles)
    if (q == p) return v;
  return std::numeric_limits<double>::quiet_NaN();
}

std::pair<double, double> mean_sd(const std::vector<double>& v) {
  if (v.empty()) return {0, 0};
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : 0.0};
}

Stats summarize(std::vector<double> samples, const std::vector<double>& percentiles) {
  Stats s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.min = samples.front();
  s.max = samples.back();
  std::tie(s.mean, s.sd) = mean_sd(samples);
  s.median = percentile_of_sorted(samples, 50);
  for (double p : percentiles) s.percentiles.emplace_back(p, percentile_of_sorted(samples, p));
  return s;
}

static std::string pct_key(double p) { return fmt::format("p{:g}", p); }

Json stats_json(const Stats& s) {
  Json j;
  j["count"] = s.count;
  j["min"] = s.min;
  j["mean"] = s.mean;
  j["median"] = s.median;
  for (const auto& [p, v] : s.percentiles) j[pct_key(p)] = v;
  j["max"] = s.max;
  j["sd"] = s.sd;
  return j;
}

std::string stats_line(const Stats& s, int digits) {
  auto f = [&](double v) { return fmt::format("{:.{}f}", v, digits); };
  std::string out = fmt::format("min {} | mean {} | median {}", f(s.min), f(s.mean), f(s.median));
  for (const auto& [p, v] : s.percentiles) out += fmt::format(" | {} {}", pct_key(p), f(v));
  out += fmt::format(" | max {}", f(s.max));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Host

// Bytes read + written per second by memcpy of a 256 MiB buffer split over `threads`.
double copy_rate_gbps(int threads) {
  const size_t bytes = size_t(256) << 20;
  std::vector<unsigned char> a(bytes, 1), b(bytes, 0);
  double best = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t chunk = bytes / size_t(nt), begin = chunk * size_t(t);
      std::memcpy(b.data() + begin, a.data() + begin, t + 1 == nt ? bytes - begin : chunk);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(bytes) / s / 1e9);
  }
  return best;
}

HostInfo probe_host() {
  HostInfo h;
  h.cpu = host_cpu_model_name();
  if (h.cpu.empty()) h.cpu = "unknown CPU";
  h.threads = std::max(1, omp_get_max_threads());
  h.fma_gflops_one = cpu_fma_peak_gflops(1, 0.05);
  h.fma_gflops_all = h.threads > 1 ? cpu_fma_peak_gflops(h.threads, 0.05) : h.fma_gflops_one;
  h.copy_gbps_one = copy_rate_gbps(1);
  h.copy_gbps_all = h.threads > 1 ? copy_rate_gbps(h.threads) : h.copy_gbps_one;
  return h;
}

Json host_json(const HostInfo& h) {
  return Json{{"cpu", h.cpu},
              {"threads", h.threads},
              {"fp32_rate_gflops_one_thread", h.fma_gflops_one},
              {"fp32_rate_gflops_all_threads", h.fma_gflops_all},
              {"fp32_rate_note", std::string("independent FMA chains per thread, ") + cpu_fma_peak_isa()},
              {"copy_gbps_one_thread", h.copy_gbps_one},
              {"copy_gbps_all_threads", h.copy_gbps_all}};
}

std::string describe_host(const HostInfo& h) {
  return fmt::format(
      "{}, {} threads; measured fp32 FMA peak ({}) {:.1f} GFLOP/s on one thread, {:.1f} on all; memcpy "
      "{:.1f} GB/s (read + write) on one thread, {:.1f} on all",
      h.cpu, h.threads, cpu_fma_peak_isa(), h.fma_gflops_one, h.fma_gflops_all, h.copy_gbps_one, h.copy_gbps_all);
}

Json device_json(const DeviceInfo& d) {
  if (!d.available) return Json{{"available", false}, {"reason", d.reason}};
  return Json{{"available", true},
              {"name", d.name},
              {"description", d.description},
              {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
              {"multiprocessors", d.multiprocessors},
              {"memory_gib", d.memory_gib},
              {"driver", d.driver},
              {"cuda_runtime", d.runtime},
              {"cudnn", d.cudnn},
              {"cublas", d.cublas},
              {"measured",
               {{"fp32_fma_tflops", d.fma_tflops},
                {"device_copy_gbps", d.copy_gbps},
                {"h2d_pinned_gbps", d.h2d_gbps},
                {"d2h_pinned_gbps", d.d2h_gbps}}}};
}

std::string describe_device(const DeviceInfo& d) {
  if (!d.available) return "no GPU: " + d.reason;
  std::string s = fmt::format("{}; driver {}, CUDA runtime {}, cuDNN {}, cuBLAS {}", d.description, d.driver, d.runtime,
                              d.cudnn, d.cublas);
  if (d.fma_tflops > 0)
    s += fmt::format(
        "\n  measured: fp32 FMA {:.1f} TFLOP/s, device copy {:.0f} GB/s (read + write), "
        "H2D {:.1f} GB/s, D2H {:.1f} GB/s (pinned)",
        d.fma_tflops, d.copy_gbps, d.h2d_gbps, d.d2h_gbps);
  return s;
}

// ---------------------------------------------------------------------------------------------

namespace {
std::string run_text(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 256> buf{};
    while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
    if (pclose(p) != 0) return {};
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}
}  // namespace

std::string git_commit() {
  const std::string dir = ENGINE_SOURCE_DIR;
  std::string commit = run_text("git -C '" + dir + "' rev-parse --short=12 HEAD 2>/dev/null");
  if (!commit.empty()) {
    const std::string dirty = run_text("git -C '" + dir + "' status --porcelain --untracked-files=no 2>/dev/null");
    return dirty.empty() ? commit : commit + " (+ local changes)";
  }
  if (const char* env = std::getenv("ENGINE_GIT_COMMIT"); env && *env) return env;
  const std::string built = ENGINE_BUILD_COMMIT;
  return built.empty() ? "unknown" : built + " (at configure time)";
}

std::string timestamp_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string si(double v, int digits) {
  const char* suffix = "";
  double x = v;
  if (std::fabs(v) >= 1e9) {
    x = v / 1e9;
    suffix = " G";
  } else if (std::fabs(v) >= 1e6) {
    x = v / 1e6;
    suffix = " M";
  } else if (std::fabs(v) >= 1e3) {
    x = v / 1e3;
    suffix = " k";
  }
  const int int_digits = std::fabs(x) >= 100 ? 3 : std::fabs(x) >= 10 ? 2 : 1;
  return fmt::format("{:.{}f}{}", x, std::max(0, digits - int_digits), suffix);
}

std::string ms_text(double ms) {
  if (!std::isfinite(ms)) return "-";
  if (ms >= 100) return fmt::format("{:.1f}", ms);
  if (ms >= 10) return fmt::format("{:.2f}", ms);
  if (ms >= 1) return fmt::format("{:.3f}", ms);
  return fmt::format("{:.4f}", ms);
}

std::string thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = int(digits.size()) - 3; i > 0; i -= 3) digits.insert(size_t(i), ",");
  return n < 0 ? "-" + digits : digits;
}

std::string Table::render(const std::string& indent) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  // A number, possibly with a unit suffix after a space ("1.23 M", "12.5%", "3.0x").
  auto numeric = [](const std::string& s) {
    if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+' || s[0] == '.'))
      return false;
    const auto space = s.find(' ');
    return space == std::string::npos ||
           (s.size() == space + 2 && std::string("kMG").find(s.back()) != std::string::npos);
  };
  // A column whose cells are mostly numbers is right-aligned, header included.
  std::vector<int> votes(widths.size(), 0);
  for (size_t r = 1; r < rows_.size(); ++r)
    for (size_t c = 0; c < rows_[r].size(); ++c) votes[c] += numeric(rows_[r][c]) ? 1 : -1;
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      line += votes[c] > 0 ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

void write_json_file(const std::string& path, const Json& json) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << json.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + path);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write " + path);
}

}  // namespace engine::bench

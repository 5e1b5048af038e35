#pragma once
// Shared by the model and ops benchmarks: statistics of timing samples, the environment (commit,
// host, device, measured ceilings), text tables and number formatting.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace engine::bench {

using Json = nlohmann::ordered_json;

// Order statistics of a set of samples (milliseconds). Percentiles use linear interpolation between
// closest ranks (numpy's default), so p50 is the median.
struct Stats {
  size_t count = 0;
  double min = 0, max = 0, mean = 0, median = 0, sd = 0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
  double percentile(double p) const;                   // one of those asked for, else NaN
};
Stats summarize(std::vector<double> samples, const std::vector<double>& percentiles);
double percentile_of_sorted(const std::vector<double>& sorted, double p);
Json stats_json(const Stats& s);
// "min 0.812 | mean 0.830 | median 0.821 | p90 0.850 | p99 0.902 | max 1.103"
std::string stats_line(const Stats& s, int digits = 3);

// Mean and sample standard deviation.
std::pair<double, double> mean_sd(const std::vector<double>& v);

struct HostInfo {
  std::string cpu;                                // /proc/cpuinfo model name
  int threads = 1;                                // OpenMP threads the cpu backend uses
  double fma_gflops_one = 0, fma_gflops_all = 0;  // measured fp32 a*x+b rate of this build's code
  double copy_gbps_one = 0, copy_gbps_all = 0;    // memcpy of 256 MiB, bytes read + written
};
HostInfo probe_host();

struct DeviceInfo {
  bool available = false;
  std::string reason;  // why not, when !available
  std::string name, description;
  int cc_major = 0, cc_minor = 0, multiprocessors = 0;
  double memory_gib = 0;
  std::string driver, runtime, cudnn, cublas;
  // Measured once per process (device_probe.cpp): fp32 FMA rate of a register-only kernel, a large
  // device-to-device copy (bytes read + written), and pinned host <-> device copies.
  double fma_tflops = 0, copy_gbps = 0, h2d_gbps = 0, d2h_gbps = 0;
};
DeviceInfo probe_device(bool measure);

Json host_json(const HostInfo& h);
Json device_json(const DeviceInfo& d);
std::string describe_host(const HostInfo& h);
std::string describe_device(const DeviceInfo& d);

// "abc1234 (+ local changes)", or "unknown"
std::string git_commit();
std::string timestamp_utc();

// Numbers for people: "1.23 M", "456 k", "12.3"; milliseconds with 3 significant digits.
std::string si(double v, int digits = 3);
std::string ms_text(double ms);
std::string thousands(int64_t n);

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns padded to their widest cell; numbers (cells starting with a digit, '-', '+' or '.')
  // are right-aligned.
  std::string render(const std::string& indent = "  ") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

void write_json_file(const std::string& path, const Json& json);

}  // namespace engine::bench

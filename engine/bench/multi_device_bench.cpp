#include "engine/bench/multi_device_bench.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>

#include "engine/core/multi_device.hpp"
#include "formats/model.hpp"

namespace engine::bench {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr int kStreamBatches = 8;  // as model_bench's pipelined mode

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return percentile_of_sorted(v, 50);
}

// Executables for `devices`, each planned for the largest share, driven as one.
class Setup {
 public:
  Setup(Backend& backend, const Graph& graph, CompileOptions copts, const std::vector<int>& devices, int batch)
      : graph_(graph), batch_(batch) {
    const int N = int(devices.size());
    int64_t largest = 0;
    for (int d = 0; d < N; ++d) {
      shares_.push_back(int64_t(batch) * (d + 1) / N - int64_t(batch) * d / N);  // contiguous, differ by <= 1
      largest = std::max(largest, shares_.back());
    }
    if (shares_.front() < 1) throw std::invalid_argument(fmt::format("batch {} < {} devices", batch, N));
    const auto& in = graph.model->input;
    sample_bytes_ = size_t(formats::element_count(in.raw_shape)) * (in.dtype == formats::InputDType::UInt8 ? 1 : 4);
    // The stream input first: it must outlive the executables that page-lock it.
    stream_input_.resize(sample_bytes_ * size_t(batch) * kStreamBatches);
    std::mt19937 rng(1234);
    for (auto& b : stream_input_) b = uint8_t(rng() & 0x7F);  // valid pixels; as floats, small finite values
    if (in.dtype == formats::InputDType::Float32)
      for (size_t i = 0; i + 4 <= stream_input_.size(); i += 4) {
        const float f = float(stream_input_[i]) / 128.0f;
        std::memcpy(&stream_input_[i], &f, 4);
      }
    std::vector<std::unique_ptr<Executable>> parts;
    std::vector<std::string> labels;
    copts.max_batch = int(largest);
    for (int d : devices) {
      copts.device = d;
      parts.push_back(backend.compile(graph, copts));
      labels.push_back(fmt::format("GPU {}", d));
    }
    multi_ = std::make_unique<MultiDeviceExecutable>(std::move(parts), std::move(labels));
    for (int d = 0; d < N; ++d) {
      StagedExecution* staged = multi_->part(d).staged_execution();
      if (!staged) throw std::runtime_error("the backend does not implement staged execution");
      StagedExecution& p = *staged;
      // Each device's share of the first batch, from its pinned staging when it has one.
      void* staging = p.input_staging();
      const uint8_t* src = stream_input_.data() + sample_bytes_ * size_t(batch) * d / size_t(N);
      if (staging) std::memcpy(staging, src, sample_bytes_ * size_t(shares_[size_t(d)]));
      inputs_.push_back(staging ? staging : src);
      start_.push_back(p.make_time_point());
      end_.push_back(p.make_time_point());
    }
  }

  int parts() const { return multi_->parts(); }
  const std::vector<int64_t>& shares() const { return shares_; }

  // One iteration of a staged scope on every device; host ms, and each device's own ms.
  double staged_iteration(bool transfers, std::vector<double>& device_ms) {
    const auto h0 = Clock::now();
    for (int d = 0; d < parts(); ++d) {
      StagedExecution& p = *multi_->part(d).staged_execution();
      const int n = int(shares_[size_t(d)]);
      start_[size_t(d)]->record();
      if (transfers) p.stage_input(inputs_[size_t(d)], n);
      p.compute(n);
      if (transfers) p.fetch_outputs(n);
      end_[size_t(d)]->record();
    }
    for (int d = 0; d < parts(); ++d) multi_->part(d).staged_execution()->synchronize();
    const double host = ms_since(h0);
    for (int d = 0; d < parts(); ++d) device_ms[size_t(d)] = end_[size_t(d)]->ms_since(*start_[size_t(d)]);
    return host;
  }

  void prepare_compute() {
    for (int d = 0; d < parts(); ++d) multi_->part(d).staged_execution()->stage_input(inputs_[size_t(d)], int(shares_[size_t(d)]));
    multi_->synchronize();
  }

  void prepare_stream() {
    multi_->pin_host_input(stream_input_.data(), stream_input_.size());
    outputs_.clear();
    pointers_.clear();
    elements_.clear();
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      elements_.push_back(graph_.output_elements(i));
      outputs_.emplace_back(size_t(elements_.back()) * size_t(batch_) * kStreamBatches);
      pointers_.push_back(outputs_.back().data());
    }
  }

  // The whole stream; host ms per batch of `batch`, and each device's ms for its share per batch.
  double stream_iteration(std::vector<double>& device_ms) {
    const int64_t count = int64_t(batch_) * kStreamBatches;
    const auto h0 = Clock::now();
    multi_->run_batches(BatchStream{stream_input_.data(), sample_bytes_, count, multi_->max_batch(), pointers_,
                                    elements_});
    const double host = ms_since(h0) / kStreamBatches;
    for (int d = 0; d < parts(); ++d) device_ms[size_t(d)] = multi_->last_part_ms(d) / kStreamBatches;
    return host;
  }
  int64_t stream_share(int d) const {
    return batch_share(int64_t(batch_) * kStreamBatches, multi_->max_batch(), d, parts()).count / kStreamBatches;
  }

 private:
  const Graph& graph_;
  int batch_;
  size_t sample_bytes_ = 0;
  std::vector<int64_t> shares_;
  std::vector<uint8_t> stream_input_;
  std::unique_ptr<MultiDeviceExecutable> multi_;
  std::vector<const void*> inputs_;
  std::vector<std::unique_ptr<TimePoint>> start_, end_;
  std::vector<std::vector<float>> outputs_;
  std::vector<float*> pointers_;
  std::vector<int64_t> elements_;
};

template <typename Iteration>
MultiScope measure(const std::string& scope, const std::vector<int>& devices, int batch, const MultiSettings& o,
                   int parts, Iteration&& iteration) {
  MultiScope r;
  r.scope = scope;
  r.devices = devices;
  std::vector<double> device_ms(static_cast<size_t>(parts));
  const auto w0 = Clock::now();
  for (int i = 0; i < 2 || ms_since(w0) < o.warmup_ms; ++i) iteration(device_ms);
  std::vector<double> all, rates;
  std::vector<std::vector<double>> per_device(static_cast<size_t>(parts));
  for (int rep = 0; rep < o.repetitions; ++rep) {
    std::vector<double> samples;
    const auto t0 = Clock::now();
    for (int it = 0;; ++it) {
      samples.push_back(iteration(device_ms));
      for (int d = 0; d < parts; ++d) per_device[size_t(d)].push_back(device_ms[size_t(d)]);
      const double s = ms_since(t0) / 1e3;
      if (s >= o.duration_s && (it + 1 >= o.iterations || (s >= 4 * o.duration_s && it + 1 >= 2))) break;
    }
    rates.push_back(batch / (median_of(samples) * 1e-3));
    all.insert(all.end(), samples.begin(), samples.end());
  }
  r.latency = summarize(all, o.percentiles);
  r.images_per_s = batch / (r.latency.median * 1e-3);
  const auto [mean, sd] = mean_sd(rates);
  r.spread_pct = mean > 0 ? 100 * sd / mean : 0;
  for (int d = 0; d < parts; ++d) r.device_images_per_s.push_back(median_of(per_device[size_t(d)]));
  return r;
}

std::vector<MultiScope> measure_set(Backend& backend, const Graph& graph, const CompileOptions& base,
                                    const std::vector<int>& devices, int batch, const MultiSettings& o) {
  Setup setup(backend, graph, base, devices, batch);
  const int N = setup.parts();
  std::vector<MultiScope> out;
  auto per_device_rates = [&](MultiScope& s, auto share_of) {
    for (int d = 0; d < N; ++d) {
      const double ms = s.device_images_per_s[size_t(d)];  // holds the median ms until here
      s.shares.push_back(share_of(d));
      s.device_images_per_s[size_t(d)] = ms > 0 ? double(share_of(d)) / (ms * 1e-3) : 0;
    }
  };
  auto staged_share = [&](int d) { return setup.shares()[size_t(d)]; };
  setup.prepare_compute();
  out.push_back(measure("compute", devices, batch, o, N, [&](std::vector<double>& ms) {
    return setup.staged_iteration(false, ms);
  }));
  per_device_rates(out.back(), staged_share);
  if (!o.transfers) return out;
  out.push_back(measure("e2e", devices, batch, o, N, [&](std::vector<double>& ms) {
    return setup.staged_iteration(true, ms);
  }));
  per_device_rates(out.back(), staged_share);
  setup.prepare_stream();
  out.push_back(measure("pipelined", devices, batch, o, N, [&](std::vector<double>& ms) {
    return setup.stream_iteration(ms);
  }));
  per_device_rates(out.back(), [&](int d) { return setup.stream_share(d); });
  return out;
}

}  // namespace

MultiCase bench_multi_device(Backend& backend, const Graph& graph, const CompileOptions& base,
                             const std::vector<int>& devices, int batch, const MultiSettings& settings) {
  MultiCase c;
  c.backend = backend.name();
  c.batch = batch;
  spdlog::info("{}: batch {}: GPU {} alone (host-timed baseline)", c.backend, batch, devices.front());
  c.one = measure_set(backend, graph, base, {devices.front()}, batch, settings);
  spdlog::info("{}: batch {}: split across {} GPUs", c.backend, batch, devices.size());
  c.all = measure_set(backend, graph, base, devices, batch, settings);
  const int64_t each_total = int64_t(batch) * int64_t(devices.size());
  if (devices.size() > 1 && each_total <= std::numeric_limits<int>::max()) {
    spdlog::info("{}: batch {} on each of {} GPUs", c.backend, batch, devices.size());
    c.each = measure_set(backend, graph, base, devices, int(each_total), settings);
  }
  for (auto* v : {&c.all, &c.each})
    for (size_t i = 0; i < v->size() && i < c.one.size(); ++i)
      (*v)[i].scaling = c.one[i].images_per_s > 0 ? (*v)[i].images_per_s / c.one[i].images_per_s : 0;
  return c;
}

void print_multi_case(const MultiCase& c) {
  std::string gpus;
  if (!c.all.empty())
    for (int d : c.all.front().devices) gpus += (gpus.empty() ? "" : ",") + std::to_string(d);
  auto table = [&](const std::vector<MultiScope>& v, const std::string& title) {
    if (v.empty()) return;
    fmt::print("\n=== {} | {} | GPUs {} (host-timed: start on all to end on all) ===\n", c.backend, title, gpus);
    Table t({"scope", "GPU alone images/s", "all GPUs images/s", "scaling", "ideal", "per GPU images/s", "±%"});
    for (size_t i = 0; i < v.size(); ++i) {
      const MultiScope& a = v[i];
      std::string per;
      for (size_t d = 0; d < a.devices.size(); ++d)
        per += fmt::format("{}{}: {}", per.empty() ? "" : ", ", a.devices[d], si(a.device_images_per_s[d]));
      t.add({a.scope, i < c.one.size() ? si(c.one[i].images_per_s) : "-", si(a.images_per_s),
             fmt::format("{:.2f}x", a.scaling), fmt::format("{}x", a.devices.size()), per,
             fmt::format("{:.1f}", a.spread_pct)});
    }
    fmt::print("{}", t.render());
  };
  table(c.all, fmt::format("batch {} split across the GPUs", c.batch));
  table(c.each, fmt::format("batch {} on each GPU", c.batch));
  std::fflush(stdout);
}

Json multi_case_json(const MultiCase& c) {
  auto scopes = [](const std::vector<MultiScope>& v) {
    Json out = Json::array();
    for (const auto& s : v)
      out.push_back(Json{{"scope", s.scope},
                         {"devices", s.devices},
                         {"shares", s.shares},
                         {"images_per_s", s.images_per_s},
                         {"device_images_per_s", s.device_images_per_s},
                         {"spread_pct", s.spread_pct},
                         {"scaling_vs_one_device", s.scaling},
                         {"latency_ms", stats_json(s.latency)}});
    return out;
  };
  return Json{{"backend", c.backend},
              {"batch", c.batch},
              {"timing", "host clock from the start on all devices to the end on all; pipelined per batch"},
              {"one_device", scopes(c.one)},
              {"all_devices", scopes(c.all)},
              {"batch_on_each_device", scopes(c.each)}};
}

}  // namespace engine::bench

#include "engine/api/backend_choice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <unistd.h>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/sha256.hpp"

namespace engine::api {
namespace {

constexpr int kTimedRuns = 3;  // after the compile's own runs (which load the kernels): the median counts

std::string join_refusals(const std::vector<BackendCandidate>& candidates, bool gpu_only) {
  std::string out;
  for (const auto& c : candidates)
    if (c.refusal && (!gpu_only || c.gpu)) out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", c.name, *c.refusal);
  return out;
}

const BackendCandidate* highest_priority(const std::vector<const BackendCandidate*>& list) {
  const BackendCandidate* best = nullptr;
  for (const auto* c : list)
    if (!best || c->priority > best->priority) best = c;  // ties keep registration order
  return best;
}

// Median seconds of kTimedRuns runs of n samples of zeros.
double median_run_seconds(Executable& exe, const Graph& graph, int n, size_t sample_bytes) {
  std::vector<unsigned char> input(sample_bytes * size_t(n), 0);
  std::vector<std::vector<float>> outputs(graph.outputs.size());
  std::vector<float*> pointers;
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].resize(size_t(graph.output_elements(i)) * size_t(n));
    pointers.push_back(outputs[i].data());
  }
  std::vector<double> seconds;
  for (int r = 0; r < kTimedRuns; ++r) {
    const auto start = std::chrono::steady_clock::now();
    exe.run(input.data(), n, pointers);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

BackendChoice choose_backend(const std::vector<BackendCandidate>& candidates,
                             const std::map<std::string, double>& images_per_s, const std::string& how,
                             Precision precision) {
  std::vector<const BackendCandidate*> usable, gpus;
  for (const auto& c : candidates) {
    if (c.refusal) continue;
    usable.push_back(&c);
    if (c.gpu) gpus.push_back(&c);
  }
  if (usable.empty())
    throw std::invalid_argument(fmt::format("no backend can run this model at {}: {}", precision_name(precision),
                                            join_refusals(candidates, false)));
  if (gpus.empty()) {
    const auto* best = highest_priority(usable);
    const std::string why = join_refusals(candidates, false);
    return {best->name, why.empty() ? "no GPU backend is built in"
                                    : "the highest-priority backend that can run it; not usable: " + why};
  }
  if (gpus.size() == 1) {
    const std::string why = join_refusals(candidates, true);
    return {gpus[0]->name, why.empty() ? "the only GPU backend"
                                       : fmt::format("the only GPU backend that runs this model at {} ({})",
                                                     precision_name(precision), why)};
  }
  const BackendCandidate* best = nullptr;
  double best_rate = 0;
  std::string rates;
  for (const auto* c : gpus) {
    const auto it = images_per_s.find(c->name);
    if (it == images_per_s.end()) continue;
    rates += fmt::format("{}{} {:.3g} images/s", rates.empty() ? "" : ", ", c->name, it->second);
    if (!best || it->second > best_rate) {
      best = c;
      best_rate = it->second;
    }
  }
  if (!best) return {highest_priority(gpus)->name, "the highest-priority GPU backend (no measurement)"};
  return {best->name, fmt::format("fastest for this model at {}: {} ({})", precision_name(precision), rates, how)};
}

std::filesystem::path BackendChoiceCache::default_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "cnn-engine" / "backend-choice.tsv";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "cnn-engine" / "backend-choice.tsv";
  return {};
}

// Line format: KEY \t NAME=IMAGES_PER_S[,NAME=IMAGES_PER_S...]
std::optional<std::map<std::string, double>> BackendChoiceCache::find(const std::string& key) const {
  if (file_.empty()) return std::nullopt;
  std::ifstream in(file_);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || line.compare(0, tab, key) != 0 || tab != key.size()) continue;
    std::map<std::string, double> rates;
    std::stringstream fields(line.substr(tab + 1));
    std::string field;
    bool ok = true;
    while (std::getline(fields, field, ',')) {
      const size_t eq = field.find('=');
      char* end = nullptr;
      const double v = eq == std::string::npos ? 0 : std::strtod(field.c_str() + eq + 1, &end);
      if (eq == 0 || eq == std::string::npos || !end || *end != '\0' || !(v > 0)) {
        ok = false;
        break;
      }
      rates[field.substr(0, eq)] = v;
    }
    if (ok && !rates.empty()) return rates;
  }
  return std::nullopt;
}

bool BackendChoiceCache::store(const std::string& key, const std::map<std::string, double>& images_per_s) const {
  if (file_.empty() || key.find_first_of("\t\n") != std::string::npos) return false;
  std::vector<std::string> kept;
  {
    std::ifstream in(file_);
    std::string line;
    while (std::getline(in, line))
      if (line.compare(0, key.size() + 1, key + "\t") != 0) kept.push_back(line);
  }
  std::string entry = key + "\t";
  bool first = true;
  for (const auto& [name, rate] : images_per_s) {
    if (name.find_first_of(",=\t\n") != std::string::npos) return false;
    entry += fmt::format("{}{}={:.6g}", first ? "" : ",", name, rate);
    first = false;
  }
  kept.push_back(entry);
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  const std::filesystem::path tmp = file_.string() + fmt::format(".tmp{}", long(getpid()));  // one per process
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& line : kept) out << line << '\n';
    if (!out.flush()) {
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, file_, ec);  // atomic: readers see the old file or the new one
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

std::string backend_choice_key(const formats::Model& model, const std::string& gpu, Precision precision, int batch) {
  std::string graph_hash;
  if (!model.source_path.empty()) {
    try {
      graph_hash = formats::sha256_file_hex(model.source_path);
    } catch (const std::exception&) {
      graph_hash.clear();  // falls back to the architecture's hash
    }
  }
  if (graph_hash.empty()) {
    std::string arch = formats::shape_to_string(model.input.shape);
    for (const auto& n : model.nodes) {
      arch += fmt::format("|{} {} <-", n.name, formats::op_name(n.op));
      for (const auto& i : n.inputs) arch += " " + i;
      arch += " " + formats::shape_to_string(model.value_shape(n.name));
      if (n.weight) arch += " w" + formats::shape_to_string(n.weight->shape);
    }
    graph_hash = formats::sha256_hex(std::span(reinterpret_cast<const uint8_t*>(arch.data()), arch.size()));
  }
  std::string gpu_name = gpu;
  std::replace_if(gpu_name.begin(), gpu_name.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
  return fmt::format("{} {} {} {}", graph_hash.substr(0, 32), precision_name(precision), batch, gpu_name);
}

ChosenBackend choose_default_backend(const std::shared_ptr<const formats::Model>& model, Precision precision,
                                     std::optional<int> max_batch, int64_t images, const BackendChoiceCache& cache) {
  const auto& registry = BackendRegistry::instance();
  const Graph graph = plan_graph(model);
  std::vector<BackendCandidate> candidates;
  std::map<std::string, std::unique_ptr<Backend>> opened;
  for (const auto& e : registry.entries()) {
    BackendCandidate c{e.name, e.priority, false, std::nullopt};
    if (auto why = e.unavailable_reason ? e.unavailable_reason() : std::nullopt) {
      c.refusal = *why;
    } else {
      auto backend = e.create();
      c.gpu = !backend->devices().empty();
      if (!backend->supports(precision)) c.refusal = fmt::format("does not compute {}", precision_name(precision));
      for (const auto& node : model->nodes) {
        if (c.refusal) break;
        if (auto why = backend->unsupported(node)) c.refusal = fmt::format("node '{}': {}", node.name, *why);
      }
      if (precision == Precision::INT8 && !model->calibration && !c.refusal)
        c.refusal = "the model has no calibration data, which int8 needs (engine calibrate)";
      opened[e.name] = std::move(backend);
    }
    candidates.push_back(std::move(c));
  }

  std::map<std::string, double> rates;
  std::string how;
  int usable_gpus = 0;
  for (const auto& c : candidates) usable_gpus += (!c.refusal && c.gpu) ? 1 : 0;
  if (usable_gpus > 1) {
    const size_t sample_bytes =
        size_t(formats::element_count(model->input.raw_shape)) *
        (model->input.dtype == formats::InputDType::UInt8 ? sizeof(uint8_t) : sizeof(float));
    std::string gpu;
    std::map<std::string, int> batches;
    for (const auto& c : candidates) {
      if (c.refusal || !c.gpu) continue;
      const Backend& b = *opened.at(c.name);
      if (gpu.empty()) gpu = b.devices().at(0);
      int n = max_batch.value_or(b.preferred_batch());
      if (!max_batch && images > 0) n = int(std::min<int64_t>(n, images));
      batches[c.name] = std::max(n, 1);
    }
    // The key names each backend's batch only when they differ; the usual case is one batch.
    int key_batch = batches.begin()->second;
    for (const auto& [name, n] : batches) key_batch = std::max(key_batch, n);
    const std::string key = backend_choice_key(*model, gpu, precision, key_batch);
    if (auto cached = cache.find(key)) {
      rates = *cached;
      how = fmt::format("measured earlier on {}, cached in {}", gpu, cache.file().string());
    } else {
      for (auto& c : candidates) {
        if (c.refusal || !c.gpu) continue;
        try {
          CompileOptions copts;
          copts.max_batch = batches.at(c.name);
          copts.precision = precision;
          auto exe = opened.at(c.name)->compile(graph, copts);
          rates[c.name] = double(copts.max_batch) / median_run_seconds(*exe, graph, copts.max_batch, sample_bytes);
        } catch (const std::exception& e) {
          c.refusal = fmt::format("compiling it failed: {}", e.what());
        }
      }
      const bool stored = cache.store(key, rates);
      how = fmt::format("measured now on {}, batch {}, {}", gpu, key_batch,
                        stored ? "cached in " + cache.file().string() : std::string("not cached"));
    }
  }
  const BackendChoice choice = choose_backend(candidates, rates, how, precision);
  auto it = opened.find(choice.name);
  return {it != opened.end() ? std::move(it->second) : registry.create(choice.name), choice.reason};
}

}  // namespace engine::api

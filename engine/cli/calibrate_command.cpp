// engine calibrate: activation ranges for post-training int8 quantization, as TensorRT's
// calibrators measure them. The model runs on sample data with every node's value as an output; the
// range of a value is the largest |x| seen ("max") or the given percentile of |x| ("percentile": a
// second pass fills a 4,096-bin histogram of |x| over [0, max] and keeps the upper edge of the bin
// where the share is reached). The input's range comes from the preprocessed samples on the host.
// The output is the same model (same weights) with "calibration" in its graph file
// (formats/model-format-v1.md, "Calibration").
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "engine/cli/commands.hpp"
#include "engine/cli/train_data.hpp"
#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/error.hpp"
#include "formats/model_loader.hpp"
#include "formats/model_writer.hpp"

namespace engine::cli {
namespace {

constexpr int kBins = 4096;

// max |x| of the preprocessed input over the first `count` samples (padding included).
double input_range(const formats::Model& model, const SampleSet& s, int64_t count) {
  const auto& in = model.input;
  double hi = 0;
  if (in.dtype == formats::InputDType::Float32) {
    const float* v = reinterpret_cast<const float*>(s.bytes.data());
    for (size_t i = 0; i < size_t(count) * s.sample_bytes / sizeof(float); ++i) hi = std::max(hi, double(std::fabs(v[i])));
    return hi;
  }
  const auto& p = *in.preprocess;
  bool seen[256] = {};
  for (size_t i = 0; i < size_t(count) * s.sample_bytes; ++i) seen[s.bytes[i]] = true;
  for (int64_t c = 0; c < in.raw_shape[0]; ++c)
    for (int v = 0; v < 256; ++v)
      if (seen[v]) {
        // As the backends compute it, in float: (pixel * scale - mean) / std.
        const float x = (float(v) * p.scale - p.mean[size_t(c)]) / p.std[size_t(c)];
        hi = std::max(hi, double(std::fabs(x)));
      }
  if (p.pad_top || p.pad_bottom || p.pad_left || p.pad_right) hi = std::max(hi, double(std::fabs(p.pad_value)));
  return hi;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int calibrate_command(const CalibrateOptions& o) {
  if (std::filesystem::path(o.output).extension() != ".json")
    throw std::invalid_argument(fmt::format("-o {}: the output must be a .json graph file", o.output));
  std::error_code ec;
  if (std::filesystem::equivalent(o.output, o.model, ec))
    throw std::invalid_argument(fmt::format("-o {}: that is the model being calibrated; write a new file", o.output));
  if (o.method == "percentile" && !(o.percentile > 0 && o.percentile <= 100))
    throw std::invalid_argument("--percentile must be in (0, 100]");

  auto backend = BackendRegistry::instance().create(o.backend.empty() ? "cpu" : o.backend);
  const formats::Model model = formats::load_model(o.model);
  formats::require_weights(model);
  const SampleSet samples = load_samples(model, o.data, "calibration data");
  const int64_t count = std::min<int64_t>(o.images, samples.count);

  // Every node's value as an output of the probe graph, in the plan's order.
  auto probe = std::make_shared<formats::Model>(model);
  probe->outputs.clear();
  for (const auto& node : model.nodes) probe->outputs.push_back(node.name);
  const Graph graph = plan_graph(probe);
  check_supported(*backend, graph);
  CompileOptions copts;
  copts.max_batch = int(std::min<int64_t>(o.batch, count));
  copts.threads = o.threads;
  auto exe = backend->compile(graph, copts);
  spdlog::info("calibrating {} on {} ({} of {} samples from {}), {} values, method {}", model.name, backend->name(), count,
               samples.count, samples.source, graph.outputs.size() + 1,
               o.method == "max" ? std::string("max") : fmt::format("percentile {}", o.percentile));

  const size_t outputs = graph.outputs.size();
  std::vector<std::vector<float>> out(outputs);
  for (size_t i = 0; i < outputs; ++i) out[i].resize(size_t(copts.max_batch) * size_t(graph.output_elements(i)));
  std::vector<float*> ptrs(outputs);
  for (size_t i = 0; i < outputs; ++i) ptrs[i] = out[i].data();
  std::vector<double> hi(outputs, 0.0);
  std::vector<std::vector<int64_t>> hist;
  auto pass = [&](bool histogram) {
    for (int64_t first = 0; first < count; first += copts.max_batch) {
      const int n = int(std::min<int64_t>(copts.max_batch, count - first));
      exe->run(samples.bytes.data() + size_t(first) * samples.sample_bytes, n, ptrs);
      for (size_t i = 0; i < outputs; ++i) {
        const size_t m = size_t(n) * size_t(graph.output_elements(i));
        const float* v = out[i].data();
        if (!histogram) {
          for (size_t k = 0; k < m; ++k) {
            if (!std::isfinite(v[k]))
              throw std::runtime_error(fmt::format("value '{}' is not finite on sample {}: the model cannot be "
                                                   "calibrated on this data",
                                                   model.nodes[i].name, first + int64_t(k / (m / size_t(n)))));
            hi[i] = std::max(hi[i], double(std::fabs(v[k])));
          }
        } else if (hi[i] > 0) {
          for (size_t k = 0; k < m; ++k) {
            const int b = std::min(kBins - 1, int(double(std::fabs(v[k])) / hi[i] * kBins));
            ++hist[i][size_t(b)];
          }
        }
      }
    }
  };
  pass(false);
  std::vector<double> range = hi;
  if (o.method == "percentile") {
    hist.assign(outputs, std::vector<int64_t>(kBins, 0));
    pass(true);
    for (size_t i = 0; i < outputs; ++i) {
      if (hi[i] == 0) continue;
      const double total = double(count) * double(graph.output_elements(i));
      int64_t kept = 0;
      for (int b = 0; b < kBins; ++b) {
        kept += hist[i][size_t(b)];
        if (double(kept) >= total * o.percentile / 100.0) {
          range[i] = hi[i] * double(b + 1) / kBins;
          break;
        }
      }
    }
  }

  nlohmann::ordered_json json = nlohmann::ordered_json::parse(read_text(o.model));
  nlohmann::ordered_json ranges;
  ranges[model.input.name] = input_range(model, samples, count);
  for (size_t i = 0; i < outputs; ++i) ranges[model.nodes[i].name] = range[i];
  nlohmann::ordered_json cal;
  cal["method"] = o.method;
  if (o.method == "percentile") cal["percentile"] = o.percentile;
  cal["images"] = count;
  cal["data"] = fmt::format("the first {} samples of {}", count, samples.source);
  cal["ranges"] = ranges;
  json["calibration"] = cal;
  formats::write_model(o.output, json, model);
  // The file must read back: the loader is the judge of what was written.
  const formats::Model back = formats::load_model(o.output);
  spdlog::info("wrote {}: {} ranges (largest {:.4g} at '{}')", o.output, back.calibration->ranges.size(),
               *std::max_element(range.begin(), range.end()),
               model.nodes[size_t(std::max_element(range.begin(), range.end()) - range.begin())].name);
  return 0;
}

}  // namespace engine::cli

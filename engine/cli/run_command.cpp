// engine run: load, plan once, classify every image in batches, report.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

#include "engine/cli/commands.hpp"
#include "engine/cli/labels.hpp"
#include "engine/cli/output_files.hpp"
#include "engine/cli/progress.hpp"
#include "engine/cli/run_report.hpp"
#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/error.hpp"
#include "formats/image.hpp"
#include "formats/model_loader.hpp"

namespace engine::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<Backend> pick_backend(const std::string& name) {
  auto& registry = BackendRegistry::instance();
  auto backend = registry.create(name.empty() ? registry.best_available().name : name);
  spdlog::info("using backend {}: {}", backend->name(), backend->description());
  return backend;
}

void check_images_fit(const formats::Model& model, const formats::ImageBatch& images) {
  const auto& in = model.input;
  if (in.dtype != formats::InputDType::UInt8)
    throw formats::FormatError(model.source_path, "the model takes float32 input; engine run feeds uint8 images");
  const formats::Shape have{images.channels, images.height, images.width};
  if (have != in.raw_shape)
    throw formats::FormatError(images.source,
                               fmt::format("images are {}x{}x{} (CxHxW) but model '{}' expects {}x{}x{}", images.channels,
                                           images.height, images.width, model.name, in.raw_shape[0], in.raw_shape[1],
                                           in.raw_shape[2]));
  if (images.count < 1) throw formats::FormatError(images.source, "holds no images");
}

void write_predictions(const std::string& path, const RunResult& r) {
  write_file_atomically(path, [&](std::ostream& out) {
    for (int64_t i = 0; i < r.images; ++i) {
      const int k = r.predicted[size_t(i)];
      out << fmt::format("{} {} {:.9g}\n", i, k, r.first_output[size_t(i * r.classes + k)]);
    }
  });
  spdlog::info("wrote {} predictions to {}", r.images, path);
}

}  // namespace

int run_command(const RunOptions& o) {
  // The backend first: a wrong --backend should fail before seconds of loading.
  auto backend = pick_backend(o.backend);

  const auto load_start = Clock::now();
  auto model = std::make_shared<const formats::Model>(formats::load_model(o.model));
  formats::ImageBatch images = formats::read_images(o.data);
  check_images_fit(*model, images);
  auto labels = load_labels(images, o.labels);
  const int64_t count = o.limit ? std::min(*o.limit, images.count) : images.count;
  const double load_seconds = seconds_since(load_start);
  spdlog::info("model {}: {} parameters; {} of {} images from {}; loaded in {:.3f} s", model->name,
               model->parameter_count(), count, images.count, images.source, load_seconds);

  const auto plan_start = Clock::now();
  const Graph graph = plan_graph(model);
  CompileOptions copts;
  copts.max_batch = int(std::min<int64_t>(o.batch, count));
  copts.deterministic = !o.nondeterministic;
  copts.precision = o.precision == "tf32" ? Precision::TF32 : Precision::FP32;
  copts.threads = o.threads;
  auto exe = backend->compile(graph, copts);
  const double plan_seconds = seconds_since(plan_start);
  spdlog::info("planned for batch {} in {:.3f} s", copts.max_batch, plan_seconds);
  if (const std::string summary = exe->plan_summary(); !summary.empty()) spdlog::debug("plan: {}", summary);

  RunResult r;
  r.backend = backend->name();
  r.device = backend->description();
  r.model_name = model->name;
  r.model_path = o.model;
  r.data_path = images.source;
  r.class_names = model->labels;
  r.images = count;
  r.classes = graph.output_elements(0);
  r.batch = copts.max_batch;
  r.precision = o.precision;
  r.deterministic = copts.deterministic;
  r.load_seconds = load_seconds;
  r.plan_seconds = plan_seconds;
  if (labels) {
    r.labels_path = labels->path;
    r.labels.assign(labels->values.begin(), labels->values.begin() + count);
    for (int64_t i = 0; i < count; ++i)
      if (r.labels[size_t(i)] >= r.classes)
        throw formats::FormatError(labels->path, fmt::format("label {} of image {} is not one of the model's {} classes",
                                                             int(r.labels[size_t(i)]), i, r.classes));
  }

  // Every buffer is sized before the clock starts: the loop measures classification only.
  const int64_t K = r.classes;
  const size_t sample_bytes = size_t(images.channels) * size_t(images.height) * size_t(images.width);
  r.first_output.assign(size_t(count * K), 0.0f);
  r.predicted.assign(size_t(count), 0);
  std::vector<std::vector<float>> other_outputs;
  for (size_t i = 1; i < graph.outputs.size(); ++i)
    other_outputs.emplace_back(size_t(graph.output_elements(i)) * size_t(copts.max_batch));
  std::vector<float*> pointers(graph.outputs.size());
  for (size_t i = 1; i < graph.outputs.size(); ++i) pointers[i] = other_outputs[i - 1].data();
  const int64_t batches = (count + copts.max_batch - 1) / copts.max_batch;
  ProgressBar progress(count, batches > 1);
  RunTimings device{};
  bool have_device_timings = false;

  const auto run_start = Clock::now();
  for (int64_t start = 0; start < count; start += copts.max_batch) {
    const int n = int(std::min<int64_t>(copts.max_batch, count - start));
    float* first = r.first_output.data() + start * K;
    pointers[0] = first;
    exe->run(images.pixels.data() + size_t(start) * sample_bytes, n, pointers);
    for (int s = 0; s < n; ++s) {
      const float* row = first + int64_t(s) * K;
      r.predicted[size_t(start + s)] = int(std::max_element(row, row + K) - row);
    }
    if (const auto t = exe->last_timings()) {
      device.upload_ms += t->upload_ms;
      device.compute_ms += t->compute_ms;
      device.download_ms += t->download_ms;
      have_device_timings = true;
    }
    progress.update(start + n);
  }
  r.seconds = seconds_since(run_start);
  progress.finish();
  if (have_device_timings) r.device_ms = device;

  if (!r.labels.empty()) {
    r.confusion.assign(size_t(K * K), 0);
    for (int64_t i = 0; i < count; ++i) {
      const int truth = r.labels[size_t(i)], guess = r.predicted[size_t(i)];
      ++r.confusion[size_t(truth * K + guess)];
      r.correct += truth == guess;
    }
  }

  if (!o.output.empty()) write_predictions(o.output, r);
  if (!o.dump_outputs.empty()) {
    write_npy_f32(o.dump_outputs, r.first_output, count, K);
    spdlog::info("wrote [{}, {}] float32 outputs to {}", count, K, o.dump_outputs);
  }
  if (o.json)
    fmt::print("{}\n", run_report_json(r));
  else
    print_run_report(r);
  return 0;
}

}  // namespace engine::cli

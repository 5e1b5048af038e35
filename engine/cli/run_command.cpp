// engine run: load, plan once, classify every image in batches, report.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "engine/api/backend_choice.hpp"
#include "engine/api/session.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/output_files.hpp"
#include "engine/cli/progress.hpp"
#include "engine/cli/run_inputs.hpp"
#include "engine/cli/run_report.hpp"
#include "engine/core/graph.hpp"
#include "engine/core/multi_device.hpp"
#include "formats/error.hpp"

namespace engine::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<Backend> pick_backend(const std::string& name) {
  auto backend = api::open_backend(name);
  spdlog::info("using backend {}: {}", backend->name(), backend->description());
  return backend;
}

// What the first output holds, named as the report and --output name it: a softmax's are
// probabilities, a sigmoid's independent scores in (0, 1), anything else unnormalised logits.
std::string output_kind(const formats::Model& model) {
  for (const formats::Node& node : model.nodes)
    if (node.name == model.outputs.at(0))
      return node.op == formats::OpType::Softmax ? "probability" : node.op == formats::OpType::Sigmoid ? "score" : "logit";
  return "logit";  // the input itself, unchanged
}

void write_predictions(const std::string& path, const RunResult& r) {
  write_file_atomically(path, [&](std::ostream& out) {
    // One file: "index class value"; several: "file index class value", the index within the file.
    for (const RunFile& f : r.files)
      for (int64_t i = f.first; i < std::min(f.first + f.count, r.images); ++i) {
        const int k = r.predicted[size_t(i)];
        const float v = r.first_output[size_t(i * r.classes + k)];
        if (r.files.size() == 1)
          out << fmt::format("{} {} {:.9g}\n", i, k, v);
        else
          out << fmt::format("{} {} {} {:.9g}\n", f.path, i - f.first, k, v);
      }
  });
  spdlog::info("wrote {} predictions (index, class, {}) to {}", r.images, r.output_kind, path);
}

}  // namespace

// --devices on a GPU backend: the indices it names (checked against the GPUs visible); none given:
// empty (the current GPU, as before --devices). A host backend has no GPUs to pick: an error, not a
// silent no-op, so a script that meant a GPU run does not get a CPU one. (engine run and engine train)
std::vector<int> pick_devices(const Backend& backend, const std::optional<std::string>& text) {
  if (!text) return {};
  const auto names = backend.devices();
  if (names.empty())
    throw std::invalid_argument(fmt::format("--devices: backend '{}' runs on the host, not on GPUs (--threads sets "
                                            "its parallelism)",
                                            backend.name()));
  return parse_device_list(*text, int(names.size()));
}

int run_command(const RunOptions& o) {
  // Where the results go is checked before anything runs: an hour of work is not lost to a typo.
  if (!o.output.empty()) check_output_path("--output", o.output);
  if (!o.dump_outputs.empty()) check_output_path("--dump-outputs", o.dump_outputs);
  // A named backend first: a wrong --backend should fail before seconds of loading. Without one the
  // choice depends on the model and precision (api::choose_default_backend): after loading.
  std::unique_ptr<Backend> backend = o.backend.empty() ? nullptr : pick_backend(o.backend);
  std::vector<int> devices = backend ? pick_devices(*backend, o.devices) : std::vector<int>{};

  const auto load_start = Clock::now();
  auto model = api::load_runnable_model(o.model);
  const RunInputs data = read_run_inputs(*model, o.data, o.labels);
  const int64_t count = o.limit ? std::min(*o.limit, data.count) : data.count;
  const double load_seconds = seconds_since(load_start);
  spdlog::info("model {}: {} parameters; {} of {} {} from {}; loaded in {:.3f} s", model->name,
               model->parameter_count(), count, data.count, data.is_float ? "samples" : "images", data.describe(),
               load_seconds);
  if (!backend) {
    const auto choice_start = Clock::now();
    auto chosen = api::choose_default_backend(model, parse_precision(o.precision).value_or(Precision::FP32), o.batch,
                                              count);
    backend = std::move(chosen.backend);
    spdlog::info("backend: {} (chosen in {:.3f} s: {})", backend->name(), seconds_since(choice_start), chosen.reason);
    devices = pick_devices(*backend, o.devices);
  }

  const auto plan_start = Clock::now();
  api::SessionOptions so;
  int batch = int(std::min<int64_t>(o.batch.value_or(backend->preferred_batch()), count));
  if (devices.size() > 1 && !o.batch) {
    // Whole batches are split across the GPUs: with the default batch every GPU gets at least one.
    const int64_t per_device = (count + int64_t(devices.size()) - 1) / int64_t(devices.size());
    batch = int(std::min<int64_t>(batch, per_device));
  }
  so.max_batch = batch;
  so.deterministic = !o.nondeterministic;
  so.precision = parse_precision(o.precision).value_or(Precision::FP32);
  so.fuse = !o.no_fuse;
  so.threads = o.threads;
  so.cuda_graph = !o.no_cuda_graph;
  so.devices = devices;
  api::Session session(std::move(backend), model, so);
  const Backend& used = session.backend();
  const double plan_seconds = seconds_since(plan_start);
  spdlog::info("planned for batch {} in {:.3f} s{}", batch, plan_seconds,
               devices.size() > 1 ? fmt::format(" on each of {} GPUs", devices.size()) : std::string());
  if (devices.size() > 1 && (count + batch - 1) / batch < int64_t(devices.size()))
    spdlog::warn("{} batch(es) of {} for {} GPUs: some GPUs get no work (a smaller --batch spreads the images)",
                 (count + batch - 1) / batch, batch, devices.size());
  if (const std::string path = session.execution_path(); !path.empty()) spdlog::info("{}: {}", used.name(), path);
  if (const std::string summary = session.plan_summary(); !summary.empty()) spdlog::debug("plan: {}", summary);

  RunResult r;
  r.backend = used.name();
  r.device = used.description();
  if (!devices.empty()) {
    const auto names = used.devices();
    std::string on;
    for (int d : devices) on += fmt::format("{}GPU {} = {}", on.empty() ? "" : ", ", d, names[size_t(d)]);
    r.device += " [--devices: " + on + "]";
    r.devices = devices;
  }
  r.path = session.execution_path();
  r.model_name = model->name;
  r.model_path = o.model;
  r.data_path = data.describe();
  r.output_kind = output_kind(*model);
  for (const InputFile& f : data.files)
    if (f.first < count) r.files.push_back({f.path, f.first, std::min(f.count, count - f.first), 0});
  r.class_names = model->labels;
  r.images = count;
  r.classes = session.classes();
  r.batch = batch;
  r.precision = o.precision;
  r.deterministic = so.deterministic;
  r.load_seconds = load_seconds;
  r.plan_seconds = plan_seconds;
  if (!data.labels.empty()) {
    r.labels_path = data.files.size() == 1 ? *data.files[0].labels_path : "beside each data file";
    r.labels.assign(data.labels.begin(), data.labels.begin() + count);
    for (const InputFile& f : data.files)
      for (int64_t i = f.first; i < std::min(f.first + f.count, count); ++i)
        if (r.labels[size_t(i)] >= r.classes)
          throw formats::FormatError(*f.labels_path, fmt::format("label {} of image {} is not one of the model's {} classes",
                                                                 int(r.labels[size_t(i)]), i - f.first, r.classes));
  }

  // Every buffer is sized before the clock starts: the loop measures classification only.
  const int64_t K = r.classes;
  r.first_output.assign(size_t(count * K), 0.0f);
  r.predicted.assign(size_t(count), 0);
  ProgressBar progress(count, (count + batch - 1) / batch > 1);
  // The images go to the device straight from where they were read (page-locked once, here).
  if (session.pin_input(data.bytes.data(), size_t(count) * data.sample_bytes))
    spdlog::debug("input images page-locked for direct uploads");

  api::RunHooks hooks;
  hooks.on_plan = [](const api::RunPlan& plan) {
    if (plan.overlapped) spdlog::debug("batches overlapped: uploads on a second stream, two input slots");
    if (plan.graph_replay) spdlog::debug("forward passes replayed as CUDA graphs");
  };
  hooks.on_outputs = [&](int64_t start, int64_t n) {
    for (int64_t s = start; s < start + n; ++s) {
      const float* row = r.first_output.data() + s * K;
      r.predicted[size_t(s)] = int(std::max_element(row, row + K) - row);
    }
    progress.update(start + n);
  };
  hooks.on_replay_failure = [](const std::exception& e) {
    spdlog::warn("CUDA graph replay failed ({}); running plain launches", e.what());
  };
  const auto run_start = Clock::now();
  const api::RunStats stats = session.run(data.bytes.data(), count, r.first_output.data(), hooks);
  r.seconds = seconds_since(run_start);
  progress.finish();
  r.device_ms = stats.device_ms;

  if (!r.labels.empty()) {
    r.confusion.assign(size_t(K * K), 0);
    for (int64_t i = 0; i < count; ++i) {
      const int truth = r.labels[size_t(i)], guess = r.predicted[size_t(i)];
      ++r.confusion[size_t(truth * K + guess)];
      r.correct += truth == guess;
    }
    for (RunFile& f : r.files)
      for (int64_t i = f.first; i < f.first + f.count; ++i) f.correct += r.labels[size_t(i)] == r.predicted[size_t(i)];
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

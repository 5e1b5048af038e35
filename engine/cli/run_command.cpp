// engine run: load, plan once, classify every image in batches, report.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "engine/cli/commands.hpp"
#include "engine/cli/labels.hpp"
#include "engine/cli/output_files.hpp"
#include "engine/cli/progress.hpp"
#include "engine/cli/run_report.hpp"
#include "engine/core/graph.hpp"
#include "engine/core/multi_device.hpp"
#include "engine/core/registry.hpp"
#include "formats/error.hpp"
#include "formats/idx.hpp"
#include "formats/image.hpp"
#include "formats/model_loader.hpp"

namespace engine::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One executable, or one per GPU driven as one (engine/core/multi_device.hpp).
std::unique_ptr<Executable> compile_on(Backend& backend, const Graph& graph, CompileOptions copts,
                                       const std::vector<int>& devices) {
  if (devices.size() <= 1) {
    if (!devices.empty()) copts.device = devices[0];
    return backend.compile(graph, copts);
  }
  std::vector<std::unique_ptr<Executable>> parts;
  std::vector<std::string> labels;
  for (int d : devices) {
    copts.device = d;
    parts.push_back(backend.compile(graph, copts));  // each uploads its own copy of the weights
    labels.push_back(fmt::format("GPU {}", d));
  }
  return std::make_unique<MultiDeviceExecutable>(std::move(parts), std::move(labels));
}

std::unique_ptr<Backend> pick_backend(const std::string& name) {
  auto& registry = BackendRegistry::instance();
  auto backend = registry.create(name.empty() ? registry.best_available().name : name);
  spdlog::info("using backend {}: {}", backend->name(), backend->description());
  return backend;
}

// The data file in the model's input dtype: uint8 images for a uint8 input (IDX, PNG, JPEG, PGM),
// float32 samples for a float32 input (IDX float32 only: the only float32 data file read).
struct InputData {
  formats::ImageBatch images;
  formats::FloatBatch floats;
  bool is_float = false;
  const std::string& source() const { return is_float ? floats.source : images.source; }
  int64_t count() const { return is_float ? floats.count : images.count; }
  size_t sample_bytes() const {
    return is_float ? floats.values.size() / size_t(floats.count) * sizeof(float)
                    : size_t(images.channels) * size_t(images.height) * size_t(images.width);
  }
  const uint8_t* bytes() const {
    return is_float ? reinterpret_cast<const uint8_t*>(floats.values.data()) : images.pixels.data();
  }
};

void check_floats_fit(const formats::Model& model, const formats::FloatBatch& floats) {
  const auto& in = model.input;
  if (floats.sample_shape != in.raw_shape)
    throw formats::FormatError(floats.source, fmt::format("samples are {} but model '{}' expects float32 {}",
                                                          formats::shape_to_string(floats.sample_shape), model.name,
                                                          formats::shape_to_string(in.raw_shape)));
}

void check_images_fit(const formats::Model& model, const formats::ImageBatch& images) {
  const auto& in = model.input;
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
  // The backend first: a wrong --backend should fail before seconds of loading.
  auto backend = pick_backend(o.backend);
  const std::vector<int> devices = pick_devices(*backend, o.devices);

  const auto load_start = Clock::now();
  auto model = std::make_shared<const formats::Model>(formats::load_model(o.model));
  formats::require_weights(*model);  // an architecture-only graph has nothing to run
  InputData data;
  data.is_float = model->input.dtype == formats::InputDType::Float32;
  if (data.is_float) {
    data.floats = formats::read_idx_floats(o.data);
    check_floats_fit(*model, data.floats);
  } else {
    data.images = formats::read_images(o.data);
    check_images_fit(*model, data.images);
  }
  auto labels = data.is_float ? load_labels(data.floats, o.labels) : load_labels(data.images, o.labels);
  const int64_t count = o.limit ? std::min(*o.limit, data.count()) : data.count();
  const double load_seconds = seconds_since(load_start);
  spdlog::info("model {}: {} parameters; {} of {} {} from {}; loaded in {:.3f} s", model->name,
               model->parameter_count(), count, data.count(), data.is_float ? "samples" : "images", data.source(),
               load_seconds);

  const auto plan_start = Clock::now();
  const Graph graph = plan_graph(model);
  CompileOptions copts;
  copts.max_batch = int(std::min<int64_t>(o.batch.value_or(backend->preferred_batch()), count));
  if (devices.size() > 1 && !o.batch) {
    // Whole batches are split across the GPUs: with the default batch every GPU gets at least one.
    const int64_t per_device = (count + int64_t(devices.size()) - 1) / int64_t(devices.size());
    copts.max_batch = int(std::min<int64_t>(copts.max_batch, per_device));
  }
  copts.deterministic = !o.nondeterministic;
  copts.precision = parse_precision(o.precision).value_or(Precision::FP32);
  copts.fuse = !o.no_fuse;
  copts.threads = o.threads;
  auto exe = compile_on(*backend, graph, copts, devices);
  const double plan_seconds = seconds_since(plan_start);
  spdlog::info("planned for batch {} in {:.3f} s{}", copts.max_batch, plan_seconds,
               devices.size() > 1 ? fmt::format(" on each of {} GPUs", devices.size()) : std::string());
  if (devices.size() > 1 && (count + copts.max_batch - 1) / copts.max_batch < int64_t(devices.size()))
    spdlog::warn("{} batch(es) of {} for {} GPUs: some GPUs get no work (a smaller --batch spreads the images)",
                 (count + copts.max_batch - 1) / copts.max_batch, copts.max_batch, devices.size());
  if (const std::string path = exe->execution_path(); !path.empty()) spdlog::info("{}: {}", backend->name(), path);
  if (const std::string summary = exe->plan_summary(); !summary.empty()) spdlog::debug("plan: {}", summary);

  RunResult r;
  r.backend = backend->name();
  r.device = backend->description();
  if (!devices.empty()) {
    const auto names = backend->devices();
    std::string on;
    for (int d : devices) on += fmt::format("{}GPU {} = {}", on.empty() ? "" : ", ", d, names[size_t(d)]);
    r.device += " [--devices: " + on + "]";
    r.devices = devices;
  }
  r.path = exe->execution_path();
  r.model_name = model->name;
  r.model_path = o.model;
  r.data_path = data.source();
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
  const size_t sample_bytes = data.sample_bytes();
  r.first_output.assign(size_t(count * K), 0.0f);
  r.predicted.assign(size_t(count), 0);
  const int64_t batches = (count + copts.max_batch - 1) / copts.max_batch;
  // Several batches on a GPU go through run_batches, a group of up to 8 at a time per GPU (the
  // progress bar moves per group): the next batch's upload overlaps this one's compute, and with
  // --devices the group's batches are split across the GPUs. One GPU with a model of several
  // outputs keeps the plain loop (as before --devices); several GPUs need run_batches, so the other
  // outputs' buffers (not reported) hold a whole group.
  const bool multi = devices.size() > 1;
  const bool overlap = exe->overlaps_batches() && batches > 1 && (graph.outputs.size() == 1 || multi);
  if (overlap) spdlog::debug("batches overlapped: uploads on a second stream, two input slots");
  const int64_t step = overlap ? int64_t(copts.max_batch) * 8 * int64_t(std::max<size_t>(1, devices.size()))
                               : copts.max_batch;
  std::vector<std::vector<float>> other_outputs;
  for (size_t i = 1; i < graph.outputs.size(); ++i)
    other_outputs.emplace_back(size_t(graph.output_elements(i)) * size_t(std::min<int64_t>(step, count)));
  std::vector<float*> pointers(graph.outputs.size());
  for (size_t i = 1; i < graph.outputs.size(); ++i) pointers[i] = other_outputs[i - 1].data();
  std::vector<int64_t> elements(graph.outputs.size());
  for (size_t i = 0; i < elements.size(); ++i) elements[i] = graph.output_elements(i);
  ProgressBar progress(count, batches > 1);
  RunTimings device{};
  bool have_device_timings = false;

  // GPU backends replay each batch size's forward pass as a CUDA graph (one launch instead of one
  // per kernel); a backend that cannot, or a capture that fails, runs plain launches.
  // Where it pays: a capture costs a plain forward plus the capture itself, so only when the same
  // batch size repeats (four full batches or more).
  bool graph_replay = !o.no_cuda_graph && count / copts.max_batch >= 4 && !exe->use_graph_replay(true).has_value();
  if (graph_replay) spdlog::debug("forward passes replayed as CUDA graphs");
  // The images go to the device straight from where they were read (page-locked once, here).
  if (exe->pin_host_input(data.bytes(), size_t(count) * sample_bytes))
    spdlog::debug("input images page-locked for direct uploads");

  const auto run_start = Clock::now();
  for (int64_t start = 0; start < count; start += step) {
    const int64_t n = std::min<int64_t>(step, count - start);
    float* first = r.first_output.data() + start * K;
    pointers[0] = first;
    const uint8_t* batch_pixels = data.bytes() + size_t(start) * sample_bytes;
    auto run_once = [&] {
      if (overlap)
        exe->run_batches(BatchStream{batch_pixels, sample_bytes, n, copts.max_batch, pointers, elements});
      else
        exe->run(batch_pixels, int(n), pointers);
    };
    if (graph_replay) {
      try {
        run_once();
      } catch (const std::exception& e) {
        spdlog::warn("CUDA graph replay failed ({}); running plain launches", e.what());
        exe->use_graph_replay(false);
        graph_replay = false;
        run_once();
      }
    } else {
      run_once();
    }
    for (int64_t s = 0; s < n; ++s) {
      const float* row = first + s * K;
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

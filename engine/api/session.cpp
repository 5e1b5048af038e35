#include "engine/api/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "engine/api/backend_choice.hpp"
#include "engine/core/multi_device.hpp"
#include "engine/core/registry.hpp"
#include "formats/model_loader.hpp"

namespace engine::api {
namespace {

// One executable, or one per GPU driven as one.
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

// Batches per run_batches call on each GPU: enough for the next upload to overlap this compute.
constexpr int64_t kBatchesPerGroup = 8;

}  // namespace

std::unique_ptr<Backend> open_backend(const std::string& name) {
  auto& registry = BackendRegistry::instance();
  return registry.create(name.empty() ? registry.best_available().name : name);
}

std::shared_ptr<const formats::Model> load_runnable_model(const std::string& path) {
  auto model = std::make_shared<const formats::Model>(formats::load_model(path));
  formats::require_weights(*model);
  return model;
}

Session::Session(const std::string& model_path, const SessionOptions& options) : options_(options) {
  if (!options.backend.empty()) backend_ = open_backend(options.backend);  // before the model: a wrong name fails first
  model_ = load_runnable_model(model_path);
  choose_backend_if_unnamed();
  compile();
}

Session::Session(std::unique_ptr<Backend> backend, std::shared_ptr<const formats::Model> model,
                 const SessionOptions& options)
    : options_(options), backend_(std::move(backend)), model_(std::move(model)) {
  choose_backend_if_unnamed();
  compile();
}

// Several GPUs: the choice is measured on the current one (the GPUs of one host are alike).
void Session::choose_backend_if_unnamed() {
  if (backend_) return;
  auto chosen = choose_default_backend(model_, options_.precision, options_.max_batch);
  backend_ = std::move(chosen.backend);
  backend_choice_ = std::move(chosen.reason);
}

void Session::compile() {
  graph_ = plan_graph(model_);
  CompileOptions copts;
  copts.max_batch = options_.max_batch.value_or(backend_->preferred_batch());
  if (copts.max_batch < 1 || copts.max_batch > (1 << 20))
    throw std::invalid_argument(fmt::format("max_batch must be within 1..{}, not {}", 1 << 20, copts.max_batch));
  copts.deterministic = options_.deterministic;
  copts.precision = options_.precision;
  copts.fuse = options_.fuse;
  copts.threads = options_.threads;
  exe_ = compile_on(*backend_, graph_, copts, options_.devices);

  const auto& in = model_->input;
  sample_bytes_ = size_t(formats::element_count(in.raw_shape)) *
                  (in.dtype == formats::InputDType::UInt8 ? sizeof(uint8_t) : sizeof(float));
  other_outputs_.resize(graph_.outputs.size() > 0 ? graph_.outputs.size() - 1 : 0);
}

RunStats Session::run(const void* input, int64_t count, float* first_output, const RunHooks& hooks) {
  return run_loop(input, count, first_output, false, hooks);
}

RunStats Session::run_device(const void* device_input, int64_t count, float* first_output, const RunHooks& hooks) {
  if (!exe_->accepts_device_input())
    throw std::invalid_argument(fmt::format("backend {} runs on host memory and cannot read a GPU array; copy it to "
                                            "the host first, or load the model on a GPU backend",
                                            backend_->name()));
  return run_loop(device_input, count, first_output, true, hooks);
}

RunStats Session::run_outputs(const void* input, int64_t count, std::span<float* const> outputs, bool on_device) {
  if (outputs.size() != graph_.outputs.size())
    throw std::invalid_argument(
        fmt::format("{} output buffers for a model of {} outputs", outputs.size(), graph_.outputs.size()));
  if (on_device && !exe_->accepts_device_input())
    throw std::invalid_argument(fmt::format("backend {} runs on host memory and cannot read a GPU array; copy it to "
                                            "the host first, or load the model on a GPU backend",
                                            backend_->name()));
  return run_loop(input, count, outputs.empty() ? nullptr : outputs[0], on_device, {}, outputs);
}

RunStats Session::run_loop(const void* input, int64_t count, float* first_output, bool on_device,
                           const RunHooks& hooks, std::span<float* const> all) {
  if (count < 0) throw std::invalid_argument("a negative number of images");
  RunStats stats;
  if (count == 0) return stats;
  std::lock_guard lock(mutex_);
  const int64_t B = exe_->max_batch();
  const int64_t K = classes();
  const size_t devices = std::max<size_t>(1, options_.devices.size());
  const int64_t batches = (count + B - 1) / B;

  // Several batches on a GPU go through run_batches, a group of up to kBatchesPerGroup per GPU: the
  // next batch's upload overlaps this one's compute, and on several GPUs the group is split across
  // them. One GPU with a model of several outputs keeps the plain loop; several GPUs need
  // run_batches, so the other outputs' buffers (not returned) hold a whole group. Input already in
  // GPU memory has no upload to overlap.
  RunPlan plan;
  plan.overlapped = !on_device && exe_->overlaps_batches() && batches > 1 &&
                    (graph_.outputs.size() == 1 || options_.devices.size() > 1);
  plan.step = plan.overlapped ? B * kBatchesPerGroup * int64_t(devices) : B;
  // A CUDA graph replaces one launch per kernel by one; its capture costs a plain forward pass plus
  // the capture, so it pays only where the same batch size repeats (four full batches or more).
  // Replay never changes a result. A backend that cannot replay runs plain launches.
  plan.graph_replay = options_.cuda_graph && count / B >= 4 && !exe_->use_graph_replay(true).has_value();
  if (!plan.graph_replay) exe_->use_graph_replay(false);
  if (hooks.on_plan) hooks.on_plan(plan);

  const size_t step_rows = size_t(std::min(plan.step, count));
  std::vector<float*> pointers(graph_.outputs.size());
  std::vector<int64_t> elements(graph_.outputs.size());
  for (size_t i = 0; i < elements.size(); ++i) elements[i] = graph_.output_elements(i);
  for (size_t i = 1; i < graph_.outputs.size() && all.empty(); ++i) {
    auto& other = other_outputs_[i - 1];
    if (other.size() < size_t(elements[i]) * step_rows) other.resize(size_t(elements[i]) * step_rows);
    pointers[i] = other.data();
  }

  RunTimings device{};
  bool timed = false;
  const auto* bytes = static_cast<const uint8_t*>(input);
  for (int64_t start = 0; start < count; start += plan.step) {
    const int64_t n = std::min(plan.step, count - start);
    pointers[0] = first_output + start * K;
    for (size_t i = 1; i < all.size(); ++i) pointers[i] = all[i] + start * elements[i];
    const uint8_t* batch = bytes + size_t(start) * sample_bytes_;
    auto run_once = [&] {
      if (plan.overlapped)
        exe_->run_batches(BatchStream{batch, sample_bytes_, n, int(B), pointers, elements});
      else if (on_device)
        exe_->run_device_input(batch, int(n), pointers);
      else
        exe_->run(batch, int(n), pointers);
    };
    if (plan.graph_replay) {
      try {
        run_once();
      } catch (const std::exception& e) {
        // A capture that fails falls back to plain launches for good.
        if (hooks.on_replay_failure) hooks.on_replay_failure(e);
        exe_->use_graph_replay(false);
        plan.graph_replay = false;
        run_once();
      }
    } else {
      run_once();
    }
    if (const auto t = exe_->last_timings()) {
      device.upload_ms += t->upload_ms;
      device.compute_ms += t->compute_ms;
      device.download_ms += t->download_ms;
      timed = true;
    }
    if (hooks.on_outputs) hooks.on_outputs(start, n);
  }
  if (timed) stats.device_ms = device;
  return stats;
}

}  // namespace engine::api

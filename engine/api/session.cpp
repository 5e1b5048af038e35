#include "engine/api/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "engine/core/registry.hpp"
#include "formats/model_loader.hpp"

namespace engine::api {

Session::Session(const std::string& model_path, const SessionOptions& options) : options_(options) {
  // As engine run: the backend first (a wrong name fails before the model is read), then the model.
  auto& registry = BackendRegistry::instance();
  backend_ = registry.create(options.backend.empty() ? registry.best_available().name : options.backend);
  model_ = std::make_shared<const formats::Model>(formats::load_model(model_path));
  formats::require_weights(*model_);  // an architecture-only graph has nothing to run
  graph_ = plan_graph(model_);

  CompileOptions copts;
  copts.max_batch = options.max_batch.value_or(backend_->preferred_batch());
  if (copts.max_batch < 1 || copts.max_batch > (1 << 20))
    throw std::invalid_argument(fmt::format("max_batch must be within 1..{}, not {}", 1 << 20, copts.max_batch));
  copts.deterministic = options.deterministic;
  copts.precision = options.precision;
  copts.fuse = options.fuse;
  copts.threads = options.threads;
  exe_ = backend_->compile(graph_, copts);

  const auto& in = model_->input;
  sample_bytes_ = size_t(formats::element_count(in.raw_shape)) *
                  (in.dtype == formats::InputDType::UInt8 ? sizeof(uint8_t) : sizeof(float));
  for (size_t i = 1; i < graph_.outputs.size(); ++i)
    other_outputs_.emplace_back(size_t(graph_.output_elements(i)) * size_t(exe_->max_batch()));
}

void Session::run(const void* input, int64_t count, float* first_output) {
  run_batches(input, count, first_output, false);
}

void Session::run_device(const void* device_input, int64_t count, float* first_output) {
  if (!exe_->accepts_device_input())
    throw std::invalid_argument(fmt::format("backend {} runs on host memory and cannot read a GPU array; copy it to "
                                            "the host first, or load the model on a GPU backend",
                                            backend_->name()));
  run_batches(device_input, count, first_output, true);
}

void Session::run_batches(const void* input, int64_t count, float* first_output, bool on_device) {
  if (count < 0) throw std::invalid_argument("a negative number of images");
  if (count == 0) return;
  std::lock_guard lock(mutex_);
  const int64_t B = exe_->max_batch();
  const int64_t K = classes();
  std::vector<float*> pointers(graph_.outputs.size());
  for (size_t i = 1; i < graph_.outputs.size(); ++i) pointers[i] = other_outputs_[i - 1].data();
  // engine run's rule: a CUDA graph pays for its capture only when the same batch size repeats
  // (four full batches or more). Graph replay never changes a result, only the launch overhead.
  bool replay = options_.cuda_graph && count / B >= 4 && !exe_->use_graph_replay(true).has_value();
  if (!replay) exe_->use_graph_replay(false);
  const auto* bytes = static_cast<const uint8_t*>(input);
  for (int64_t start = 0; start < count; start += B) {
    const int n = int(std::min(B, count - start));
    pointers[0] = first_output + start * K;
    const uint8_t* batch = bytes + size_t(start) * sample_bytes_;
    auto run_once = [&] {
      if (on_device)
        exe_->run_device_input(batch, n, pointers);
      else
        exe_->run(batch, n, pointers);
    };
    if (replay) {
      try {
        run_once();
        continue;
      } catch (const std::exception&) {
        // As engine run: a capture that fails falls back to plain launches for good.
        exe_->use_graph_replay(false);
        replay = false;
      }
    }
    run_once();
  }
}

}  // namespace engine::api

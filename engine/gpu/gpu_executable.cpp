#include "engine/gpu/gpu_executable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace engine::gpu {

GpuExecutable::GpuExecutable(const Graph& graph, const CompileOptions& options)
    : graph_(graph), options_(options), max_batch_(options.max_batch) {
  if (max_batch_ < 1) throw std::invalid_argument("max_batch must be at least 1");
  const auto& in = graph_.model->input;
  const size_t B = size_t(max_batch_);
  arena_ = DeviceBuffer<float>(size_t(graph_.arena_floats_per_sample) * B, "activation arena");
  // All-ones bytes are a NaN: an element a kernel forgets to write poisons the output visibly.
  // Async on our own non-blocking stream (which does not order with the legacy default stream),
  // then wait, so no later work can race with the poisoning.
  CUDA_CHECK(cudaMemsetAsync(arena_.data(), 0xFF, arena_.bytes(), stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));

  const int64_t raw_elements = formats::element_count(in.raw_shape);
  input_sample_bytes_ = size_t(raw_elements) *
                        (in.dtype == formats::InputDType::UInt8 ? sizeof(uint8_t) : sizeof(float));
  pinned_input_ = PinnedBuffer<uint8_t>(input_sample_bytes_ * B, "input staging");

  if (in.dtype == formats::InputDType::UInt8) {
    const auto& p = *in.preprocess;
    raw_input_ = DeviceBuffer<uint8_t>(size_t(raw_elements) * B, "raw input");
    const int C = int(in.raw_shape[0]);
    std::vector<float> params(p.mean);
    params.insert(params.end(), p.std.begin(), p.std.end());
    channel_params_ = DeviceBuffer<float>(params.size(), "preprocess parameters");
    // On our stream: the non-blocking stream does not order with synchronous legacy copies.
    CUDA_CHECK(cudaMemcpyAsync(channel_params_.data(), params.data(), params.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    preprocess_ = PreprocessShape{C, int(in.raw_shape[1]), int(in.raw_shape[2]),
                                  p.pad_top, p.pad_bottom, p.pad_left, p.pad_right,
                                  p.scale, p.pad_value,
                                  channel_params_.data(), channel_params_.data() + C};
  }

  int64_t total = 0;
  for (size_t i = 0; i < graph_.outputs.size(); ++i) {
    output_offsets_.push_back(total);
    total += graph_.output_elements(i) * int64_t(B);
  }
  pinned_output_ = PinnedBuffer<float>(size_t(total), "output staging");
}

float* GpuExecutable::device_value(int value_id) const {
  return arena_.data() + graph_.value(value_id).arena_offset * max_batch_;
}

void GpuExecutable::upload_async(const void* host_input, int n) {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("batch of {} images outside 1..{}", n, max_batch_));
  const size_t bytes = input_sample_bytes_ * size_t(n);
  const auto* in = static_cast<const uint8_t*>(host_input);
  const bool registered = pinned_user_ && in >= pinned_user_ && in + bytes <= pinned_user_ + pinned_user_bytes_;
  const void* source = pinned_input_.data();
  if (registered) source = host_input;  // page-locked by pin_host_input: DMA straight from it
  else if (host_input != pinned_input_.data()) std::memcpy(pinned_input_.data(), host_input, bytes);
  float* dst = device_value(graph_.input);
  if (graph_.model->input.dtype == formats::InputDType::UInt8) {
    CUDA_CHECK(cudaMemcpyAsync(raw_input_.data(), source, bytes, cudaMemcpyHostToDevice, stream()));
    preprocess_uint8(raw_input_.data(), dst, n, preprocess_, stream());
  } else {
    CUDA_CHECK(cudaMemcpyAsync(dst, source, bytes, cudaMemcpyHostToDevice, stream()));
  }
}

void GpuExecutable::download_async(int n) {
  for (size_t i = 0; i < graph_.outputs.size(); ++i) {
    const size_t count = size_t(graph_.output_elements(i)) * size_t(n);
    CUDA_CHECK(cudaMemcpyAsync(pinned_output_.data() + output_offsets_[i], device_value(graph_.outputs[i]),
                               count * sizeof(float), cudaMemcpyDeviceToHost, stream()));
  }
}

void GpuExecutable::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream())); }

const float* GpuExecutable::staged_output(size_t i) const {
  return pinned_output_.data() + output_offsets_.at(i);
}

GpuExecutable::~GpuExecutable() {
  if (graph_exec_) {
    cudaStreamSynchronize(stream());
    cudaGraphExecDestroy(graph_exec_);
  }
  if (pinned_user_ && pinned_user_owned_) {
    cudaStreamSynchronize(stream());
    // A failure here (memory already unregistered) must not linger as the runtime's last error, where
    // another executable's next launch check would report it as its own.
    if (cudaHostUnregister(const_cast<uint8_t*>(pinned_user_)) != cudaSuccess) cudaGetLastError();
  }
}

namespace {

// Whether the first and the last byte of [data, data + bytes) are page-locked host memory (registered
// by cudaHostRegister or allocated by cudaMallocHost). Unregistered memory answers
// cudaMemoryTypeUnregistered, not an error (CUDA 11 and later).
bool host_range_registered(const void* data, size_t bytes) {
  for (const void* p : {data, static_cast<const void*>(static_cast<const uint8_t*>(data) + bytes - 1)}) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (attributes.type != cudaMemoryTypeHost) return false;
  }
  return true;
}

}  // namespace

bool GpuExecutable::pin_host_input(const void* data, size_t bytes) {
  if (pinned_user_ || data == nullptr || bytes == 0) return false;
  // Page-locking is a plan-time cost (about a millisecond per 10 MB); if the system refuses (locked
  // memory limits), uploads keep going through the staging buffer.
  // With unified addressing (every 64-bit CUDA platform) registered memory is portable: page-locked
  // for every device. Another executable of the same input (one per GPU, engine/core/multi_device.hpp)
  // may have registered it already; then it is used as is and left for that one to unregister
  // (executables of a multi-device executable all live and die together). Asked first rather than
  // learnt from cudaErrorHostMemoryAlreadyRegistered: compute-sanitizer counts every API error.
  bool owned = false;
  if (!host_range_registered(data, bytes)) {
    if (cudaHostRegister(const_cast<void*>(data), bytes, cudaHostRegisterPortable) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    owned = true;
  }
  pinned_user_ = static_cast<const uint8_t*>(data);
  pinned_user_bytes_ = bytes;
  pinned_user_owned_ = owned;
  return true;
}

namespace {

class EventTimePoint final : public TimePoint {
 public:
  explicit EventTimePoint(cudaStream_t stream) : stream_(stream) {}
  void record() override { event_.record(stream_); }
  double ms_since(const TimePoint& start) override {
    CUDA_CHECK(cudaEventSynchronize(event_.get()));
    return event_.since(dynamic_cast<const EventTimePoint&>(start).event_);
  }

 private:
  cudaStream_t stream_;
  Event event_;
};

}  // namespace

std::unique_ptr<TimePoint> GpuExecutable::make_time_point() { return std::make_unique<EventTimePoint>(stream()); }

std::optional<std::string> GpuExecutable::use_graph_replay(bool on) {
  graph_replay_ = on;
  if (on && graph_input_copy_.size() == 0)
    graph_input_copy_ = DeviceBuffer<float>(size_t(graph_.value(graph_.input).elements) * size_t(max_batch_),
                                            "input copy for CUDA-graph capture");
  return std::nullopt;
}

void GpuExecutable::compute(int n) {
  if (!graph_replay_) {
    forward(n);
    return;
  }
  if (!graph_exec_ || graph_n_ != n) {
    if (graph_exec_) {
      synchronize();
      CUDA_CHECK(cudaGraphExecDestroy(graph_exec_));
      graph_exec_ = nullptr;
    }
    // One plain forward first: lazily loaded kernels and per-n host state (descriptors) are set up
    // outside the capture. The graph then runs forward(n) again on the same input, but the arena
    // reuses blocks by liveness (a later node may write over the input's block), so the input is
    // saved before the plain forward and put back after it.
    const float* input = device_value(graph_.input);
    const size_t input_bytes = size_t(graph_.value(graph_.input).elements) * size_t(n) * sizeof(float);
    CUDA_CHECK(cudaMemcpyAsync(graph_input_copy_.data(), input, input_bytes, cudaMemcpyDeviceToDevice, stream()));
    forward(n);
    CUDA_CHECK(cudaMemcpyAsync(device_value(graph_.input), graph_input_copy_.data(), input_bytes,
                               cudaMemcpyDeviceToDevice, stream()));
    synchronize();
    CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      forward(n);
    } catch (const std::exception& e) {
      cudaStreamEndCapture(stream(), &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw CudaError(fmt::format("forward({}) cannot be captured as a CUDA graph: {}", n, e.what()));
    }
    const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
    if (ended != cudaSuccess || !graph) {
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw CudaError(fmt::format("forward({}) cannot be captured as a CUDA graph: {}", n, cudaGetErrorString(ended)));
    }
    const cudaError_t made = cudaGraphInstantiate(&graph_exec_, graph, 0);
    cudaGraphDestroy(graph);
    if (made != cudaSuccess) {
      graph_exec_ = nullptr;
      cudaGetLastError();
      throw CudaError(fmt::format("instantiating the CUDA graph of forward({}): {}", n, cudaGetErrorString(made)));
    }
    graph_n_ = n;
  }
  CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream()));
}

void GpuExecutable::check_outputs(std::span<float* const> outputs) const {
  if (outputs.size() != graph_.outputs.size())
    throw std::invalid_argument(fmt::format("expected {} output buffers, got {}", graph_.outputs.size(),
                                            outputs.size()));
}

void GpuExecutable::run(const void* input, int n, std::span<float* const> outputs) {
  check_outputs(outputs);
  ev_start_.record(stream());
  upload_async(input, n);
  finish_run(n, outputs);
}

void GpuExecutable::run_device_input(const void* device_input, int n, std::span<float* const> outputs) {
  check_outputs(outputs);
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("batch of {} images outside 1..{}", n, max_batch_));
  // A host pointer or another GPU's memory would fault inside a kernel; say so before launching.
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, device_input) != cudaSuccess) {
    cudaGetLastError();
    throw std::invalid_argument("the input is not memory CUDA knows");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    throw std::invalid_argument("the input is not in GPU memory");
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (attr.device != device)
    throw std::invalid_argument(
        fmt::format("the input is on GPU {} but this model runs on GPU {}", attr.device, device));
  // DLPack hands over a pointer, not the producer's stream: torch or CuPy may still be writing the
  // input on a stream of theirs. Waiting for the whole device is the one order that holds for all.
  CUDA_CHECK(cudaDeviceSynchronize());
  ev_start_.record(stream());
  float* dst = device_value(graph_.input);
  const size_t bytes = input_sample_bytes_ * size_t(n);
  // The same preprocessing kernel as upload_async, reading the caller's memory instead of our copy.
  if (graph_.model->input.dtype == formats::InputDType::UInt8)
    preprocess_uint8(static_cast<const uint8_t*>(device_input), dst, n, preprocess_, stream());
  else
    CUDA_CHECK(cudaMemcpyAsync(dst, device_input, bytes, cudaMemcpyDeviceToDevice, stream()));
  finish_run(n, outputs);
}

void GpuExecutable::run_batches(const BatchStream& s) {
  check_batch_stream(s, max_batch_);
  if (s.sample_bytes != input_sample_bytes_)
    throw std::invalid_argument(fmt::format("{}-byte samples, but the model's are {} bytes", s.sample_bytes,
                                            input_sample_bytes_));
  const int64_t batches = (s.count + s.batch - 1) / s.batch;
  if (batches < 2 || !overlaps_batches()) {
    Executable::run_batches(s);
    return;
  }
  if (!overlap_) {
    overlap_ = std::make_unique<Overlap>();
    overlap_->raw = DeviceBuffer<uint8_t>(input_sample_bytes_ * size_t(max_batch_), "second raw-input slot");
    overlap_->pinned = PinnedBuffer<uint8_t>(input_sample_bytes_ * size_t(max_batch_), "second input staging slot");
  }
  Overlap& o = *overlap_;
  uint8_t* raw[2] = {raw_input_.data(), o.raw.data()};
  uint8_t* staging[2] = {pinned_input_.data(), o.pinned.data()};
  const auto* in = static_cast<const uint8_t*>(s.input);
  auto size_of = [&](int64_t k) { return int(std::min<int64_t>(s.batch, s.count - k * s.batch)); };
  // Batch k: host (page-locked, or through staging slot k % 2) -> raw slot k % 2, on the copy
  // stream, once the preprocessing of batch k - 2 has read that slot.
  auto upload = [&](int64_t k) {
    const int slot = int(k % 2);
    const size_t bytes = input_sample_bytes_ * size_t(size_of(k));
    const uint8_t* src = in + size_t(k) * size_t(s.batch) * input_sample_bytes_;
    const bool registered = pinned_user_ && src >= pinned_user_ && src + bytes <= pinned_user_ + pinned_user_bytes_;
    if (!registered) {
      CUDA_CHECK(cudaEventSynchronize(o.uploaded[slot].get()));  // batch k - 2 has left the staging slot
      std::memcpy(staging[slot], src, bytes);
      src = staging[slot];
    }
    CUDA_CHECK(cudaStreamWaitEvent(o.copy.get(), o.consumed[slot].get(), 0));
    CUDA_CHECK(cudaMemcpyAsync(raw[slot], src, bytes, cudaMemcpyHostToDevice, o.copy.get()));
    o.uploaded[slot].record(o.copy.get());
  };
  auto copy_out = [&](int64_t k) {
    for (size_t i = 0; i < s.outputs.size(); ++i)
      std::memcpy(s.outputs[i] + k * s.batch * s.output_elements[i], staged_output(i),
                  size_t(s.output_elements[i]) * size_t(size_of(k)) * sizeof(float));
  };
  // Every event starts recorded (complete), so the first waits on them pass.
  for (int slot = 0; slot < 2; ++slot) {
    o.uploaded[slot].record(stream());
    o.consumed[slot].record(stream());
  }
  o.started.record(stream());
  CUDA_CHECK(cudaStreamWaitEvent(o.copy.get(), o.started.get(), 0));  // after everything before this call
  upload(0);
  float* input_value = device_value(graph_.input);
  for (int64_t k = 0; k < batches; ++k) {
    const int slot = int(k % 2), n = size_of(k);
    CUDA_CHECK(cudaStreamWaitEvent(stream(), o.uploaded[slot].get(), 0));
    if (k == 0) ev_uploaded_.record(stream());
    preprocess_uint8(raw[slot], input_value, n, preprocess_, stream());
    o.consumed[slot].record(stream());
    // Full batches replay the captured graph when replay is on; a shorter last batch runs plain
    // launches rather than capturing a graph it would use once.
    if (graph_replay_ && n == s.batch) compute(n);
    else forward(n);
    if (k + 1 < batches) upload(k + 1);
    if (k > 0) {  // the previous batch's outputs leave the staging buffer before this one's arrive
      CUDA_CHECK(cudaEventSynchronize(o.downloaded.get()));
      copy_out(k - 1);
    }
    if (k + 1 == batches) ev_computed_.record(stream());
    download_async(n);
    o.downloaded.record(stream());
  }
  ev_downloaded_.record(stream());
  synchronize();
  copy_out(batches - 1);
  // The first upload and the last download are the parts nothing overlaps; compute_ms is the rest.
  timings_ = RunTimings{ev_uploaded_.since(o.started), ev_computed_.since(ev_uploaded_),
                        ev_downloaded_.since(ev_computed_)};
}

void GpuExecutable::finish_run(int n, std::span<float* const> outputs) {
  ev_uploaded_.record(stream());
  compute(n);
  ev_computed_.record(stream());
  download_async(n);
  ev_downloaded_.record(stream());
  synchronize();
  for (size_t i = 0; i < outputs.size(); ++i)
    std::memcpy(outputs[i], staged_output(i), size_t(graph_.output_elements(i)) * size_t(n) * sizeof(float));
  timings_ = RunTimings{ev_uploaded_.since(ev_start_), ev_computed_.since(ev_uploaded_),
                        ev_downloaded_.since(ev_computed_)};
}

}  // namespace engine::gpu

#pragma once
// Owning RAII wrappers for device memory, pinned host memory, streams and events. Allocation
// happens at plan time only; a failed cudaMalloc (out of memory) is a CudaError naming `what`.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/gpu/cuda_check.hpp"

namespace engine::gpu {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t count, const std::string& what) : count_(count) {
    // count * sizeof(T) must not wrap around to a small allocation that kernels then overrun.
    if (count_ > SIZE_MAX / sizeof(T))
      throw CudaError("allocating " + what + ": " + std::to_string(count_) + " elements of " +
                      std::to_string(sizeof(T)) + " bytes exceed the address space");
    if (count_ > 0)
      CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&data_), count_ * sizeof(T)),
                     "allocating " + what + " (" + std::to_string(count_ * sizeof(T)) + " bytes)");
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { reset(); data_ = std::exchange(o.data_, nullptr); count_ = std::exchange(o.count_, 0); }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void reset() { if (data_) cudaFree(data_); data_ = nullptr; count_ = 0; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(size_t count, const std::string& what) : count_(count) {
    if (count_ > SIZE_MAX / sizeof(T))
      throw CudaError("allocating pinned " + what + ": " + std::to_string(count_) + " elements of " +
                      std::to_string(sizeof(T)) + " bytes exceed the address space");
    if (count_ > 0) CUDA_CHECK_CTX(cudaMallocHost(reinterpret_cast<void**>(&data_), count_ * sizeof(T)), "allocating pinned " + what);
  }
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) { reset(); data_ = std::exchange(o.data_, nullptr); count_ = std::exchange(o.count_, 0); }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return count_; }
  void reset() { if (data_) cudaFreeHost(data_); data_ = nullptr; count_ = 0; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { if (stream_) cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { if (event_) cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(event_, s)); }
  // Milliseconds from `start` to this event; both must have completed.
  float since(const Event& start) const {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace engine::gpu

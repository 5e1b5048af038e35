#include "engine/gpu/device.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/gpu/cuda_check.hpp"

namespace engine::gpu {

std::optional<std::string> no_gpu_reason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    return fmt::format("no usable CUDA device ({})", cudaGetErrorString(status));
  }
  if (count == 0) return std::string("no CUDA device found");
  return std::nullopt;
}

DeviceInfo current_device() {
  if (auto why = no_gpu_reason()) throw CudaError(*why);
  DeviceInfo info;
  CUDA_CHECK(cudaGetDevice(&info.index));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, info.index));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.global_memory = prop.totalGlobalMem;
  CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

std::string describe(const DeviceInfo& info) {
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", info.name, info.cc_major, info.cc_minor,
                     info.multiprocessors, info.global_memory / double(1 << 30));
}

}  // namespace engine::gpu

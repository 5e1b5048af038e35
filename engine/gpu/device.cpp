#include "engine/gpu/device.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>

#include "engine/gpu/cuda_check.hpp"

namespace engine::gpu {

std::string explain_no_gpu(int status, int driver_version, const char* visible_devices) {
  // The runtime's own strings read as a version problem even when there is simply no driver or no
  // GPU ("CUDA driver version is insufficient for CUDA runtime version"), so say first what it means
  // for the user and keep CUDA's words, with the call, in parentheses for whoever debugs the machine.
  const std::string cuda = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(cudaError_t(status)));
  std::string what;
  switch (cudaError_t(status)) {
    case cudaErrorInsufficientDriver:
      // The same code means "no driver" and "driver too old"; the driver version tells them apart
      // (0 when no driver library can be loaded).
      if (driver_version == 0) {
        what = "no CUDA driver found";
      } else {
        int runtime = 0;
        cudaRuntimeGetVersion(&runtime);
        what = fmt::format(
            "the NVIDIA driver supports CUDA up to {}.{}, but this build needs CUDA {}.{}: update the driver",
            driver_version / 1000, driver_version % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
      }
      break;
    case cudaErrorStubLibrary: what = "no CUDA driver found (only the toolkit's stub library)"; break;
    case cudaErrorNoDevice:
      what = visible_devices ? fmt::format("no GPU visible (CUDA_VISIBLE_DEVICES='{}')", visible_devices)
                             : std::string("the CUDA driver finds no GPU");
      break;
    case cudaErrorSystemDriverMismatch: what = "the NVIDIA driver and kernel module versions differ"; break;
    case cudaErrorDevicesUnavailable: what = "every GPU is busy or unavailable (exclusive compute mode?)"; break;
    default: what = "the CUDA runtime cannot start"; break;
  }
  return fmt::format("no usable NVIDIA GPU: {} ({})", what, cuda);
}

std::optional<std::string> no_gpu_reason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    return explain_no_gpu(status, driver, std::getenv("CUDA_VISIBLE_DEVICES"));
  }
  if (count == 0) return explain_no_gpu(cudaErrorNoDevice, 0, std::getenv("CUDA_VISIBLE_DEVICES"));
  return std::nullopt;
}

DeviceInfo current_device() {
  if (auto why = no_gpu_reason()) throw CudaError(*why);
  int index = 0;
  CUDA_CHECK(cudaGetDevice(&index));
  return device_info(index);
}

int device_count() {
  if (no_gpu_reason()) return 0;
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}

std::vector<std::string> device_descriptions() {
  std::vector<std::string> out;
  const int count = device_count();
  for (int i = 0; i < count; ++i) out.push_back(describe(device_info(i)));
  return out;
}

int resolve_device(int requested) {
  if (requested < 0) {
    if (auto why = no_gpu_reason()) throw CudaError(*why);
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    return current;
  }
  const int count = device_count();
  if (count == 0) throw CudaError(*no_gpu_reason());
  if (requested >= count)
    throw std::invalid_argument(fmt::format("GPU {} does not exist ({} visible here: {})", requested, count,
                                            count == 1 ? std::string("0") : fmt::format("0..{}", count - 1)));
  return requested;
}

DeviceGuard::DeviceGuard(int device) : device_(device) {
  CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  // No throwing from a destructor: a failure to switch back is cleared, and the next CUDA call on
  // this thread (which sets its own device through a guard) is unaffected.
  if (previous_ != device_ && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
}

DeviceInfo device_info(int index) {
  if (auto why = no_gpu_reason()) throw CudaError(*why);
  DeviceInfo info;
  info.index = index;
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

#pragma once
// Which CUDA device we run on. Any failure of cudaGetDeviceCount (no driver, a driver too old, no
// device) means "no GPU": the reason is kept for the user, in words that say which.
#include <optional>
#include <string>
#include <vector>

namespace engine::gpu {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  size_t global_memory = 0;
  int driver_version = 0, runtime_version = 0;
};

// nullopt when a GPU is usable; otherwise the reason none is, as explain_no_gpu words it.
std::optional<std::string> no_gpu_reason();
// "no usable NVIDIA GPU: no CUDA driver found (cudaGetDeviceCount: ...)": what a failed
// cudaGetDeviceCount (`status`, a cudaError_t) means for the user. `driver_version` is
// cudaDriverGetVersion's (0: no driver), `visible_devices` CUDA_VISIBLE_DEVICES (nullptr: unset).
std::string explain_no_gpu(int status, int driver_version, const char* visible_devices);
// The current device (index 0 unless CUDA_VISIBLE_DEVICES says otherwise). Throws if none.
DeviceInfo current_device();
// Device `index` (0..device_count()-1). Throws if none or out of range.
DeviceInfo device_info(int index);
// How many devices are visible: 0 where no GPU is usable (no_gpu_reason says why).
int device_count();
// describe() of every visible device, by index; empty without a usable GPU.
std::vector<std::string> device_descriptions();
// CompileOptions::device made concrete: -1 is the current device; any other index must exist
// (std::invalid_argument naming the visible range otherwise).
int resolve_device(int requested);

// Makes `device` current on this thread for the guard's scope and restores the previous one after
// (CUDA's current device is per host thread). Switching is skipped when it is already current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1, device_ = -1;
};
std::string describe(const DeviceInfo& info);  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"

}  // namespace engine::gpu

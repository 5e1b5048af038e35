#pragma once
// Binds a GPU executable to one CUDA device. The current device is per host thread and an
// executable may be called from any thread (engine/core/multi_device.hpp gives each part its own),
// so every entry point, destruction included, runs under a DeviceGuard for the executable's device:
// the executable's streams, events, buffers, graphs and library handles all belong to that device,
// and a call made with another device current would fail (or, for a kernel launch, run on the wrong
// GPU). A wrapper rather than guards in each method: the derived executables' members (cuDNN and
// cuBLAS handles, weights) are destroyed before any base-class destructor body could set the device.
#include <memory>
#include <string>
#include <utility>

#include "engine/core/backend.hpp"
#include "engine/gpu/device.hpp"

namespace engine::gpu {

// `exe` must have been constructed with `device` current. A non-empty `plan_note` becomes the second
// line of its plan summary (a choice made above the executable: the precision it runs at).
std::unique_ptr<Executable> bind_to_device(int device, std::unique_ptr<Executable> exe, std::string plan_note = {});

// What a GPU backend's compile() returns: make() runs with the device of `options` current (its
// constructors allocate and upload there) and its executable comes back bound to it.
template <typename Make>
std::unique_ptr<Executable> compile_on_device(const CompileOptions& options, Make&& make) {
  const int device = resolve_device(options.device);
  DeviceGuard guard(device);
  return bind_to_device(device, std::forward<Make>(make)());
}

}  // namespace engine::gpu

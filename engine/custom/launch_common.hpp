#pragma once
// Small pieces every custom-backend launcher shares. Host-only, no fmt: included from .cu files.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace engine::custom {

// An activation applied in a kernel's epilogue (fused) or by the elementwise kernel (unfused).
enum class Activation : int { None = 0, Relu = 1, Tanh = 2, Sigmoid = 3 };

inline const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None: return "none";
    case Activation::Relu: return "relu";
    case Activation::Tanh: return "tanh";
    case Activation::Sigmoid: return "sigmoid";
  }
  return "?";
}

// What the planners need to know about the device, read once at compile time.
struct DeviceLimits {
  int multiprocessors = 1;
  size_t shared_per_block = 48 * 1024;  // the default limit without cudaFuncSetAttribute
};

// Blocks for a grid-stride loop over `total` items: enough to fill the device, never more than
// needed, never above the grid limit. Always >= 1.
inline int grid_stride_blocks(int64_t total, int threads, const DeviceLimits& limits) {
  const int64_t needed = (total + threads - 1) / threads;
  const int64_t cap = int64_t(std::max(limits.multiprocessors, 1)) * 32;
  return int(std::max<int64_t>(1, std::min<int64_t>({needed, cap, int64_t(0x7fffffff)})));
}

}  // namespace engine::custom

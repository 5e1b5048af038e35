#include "engine/gpu/cuda_check.hpp"

#include <fmt/format.h>

namespace engine::gpu {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line,
                      const std::string& context) {
  // Clear the runtime's last-error slot: a non-sticky failure (an out-of-memory cudaMalloc, a bad
  // launch configuration) would otherwise be reported again by the next launch check.
  cudaGetLastError();
  std::string where = context.empty() ? std::string() : fmt::format("{}: ", context);
  throw CudaError(fmt::format("{}CUDA error {} ({}) in {} at {}:{}", where, cudaGetErrorName(status),
                              cudaGetErrorString(status), call, file, line));
}

}  // namespace engine::gpu

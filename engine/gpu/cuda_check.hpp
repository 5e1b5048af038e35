#pragma once
// Every CUDA runtime call goes through CUDA_CHECK; the exception says which call failed, where, and
// (through `context`) which node or op it served. Usable from .cu and .cpp files alike.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace engine::gpu {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line,
                                   const std::string& context);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line,
                       const std::string& context = {}) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line, context);
}

}  // namespace engine::gpu

#define CUDA_CHECK(call) ::engine::gpu::check_cuda((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_CTX(call, context) \
  ::engine::gpu::check_cuda((call), #call, __FILE__, __LINE__, (context))
// After a kernel launch: reports bad launch configurations at once, naming the kernel's purpose.
#define CUDA_CHECK_LAUNCH(context) \
  ::engine::gpu::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__, (context))

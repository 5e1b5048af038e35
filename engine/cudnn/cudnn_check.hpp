#pragma once
// Status checks for cuDNN and cuBLAS calls. Every call of this backend goes through CUDNN_CHECK /
// CUBLAS_CHECK with a context naming the node it serves ("node 'c1' (conv2d)"), so a failure says
// which call failed, where, for which node, and (cuDNN 9) cuDNN's own detailed message.
// The context is passed by reference and only formatted on failure: checks cost nothing per run.
#include <cublas_api.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace engine::cudnn {

class LibraryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line,
                                    const std::string& context);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line,
                                     const std::string& context);

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line,
                        const std::string& context) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_error(status, call, file, line, context);
}
inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line,
                         const std::string& context) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line, context);
}

}  // namespace engine::cudnn

#define CUDNN_CHECK_CTX(call, context) ::engine::cudnn::check_cudnn((call), #call, __FILE__, __LINE__, (context))
#define CUBLAS_CHECK_CTX(call, context) ::engine::cudnn::check_cublas((call), #call, __FILE__, __LINE__, (context))

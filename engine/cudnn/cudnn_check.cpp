#include "engine/cudnn/cudnn_check.hpp"

#include <fmt/format.h>

namespace engine::cudnn {
namespace {

// Long calls (the argument list of cudnnConvolutionBiasActivationForward) make unreadable errors:
// keep the function name only.
std::string function_name(const char* call) {
  std::string s(call);
  const auto paren = s.find('(');
  return paren == std::string::npos ? s : s.substr(0, paren);
}

}  // namespace

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line,
                       const std::string& context) {
  // cuDNN 9 keeps a per-thread message saying which parameter it rejected and why.
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string where = context.empty() ? std::string() : fmt::format("{}: ", context);
  std::string message = fmt::format("{}cuDNN error {} in {} at {}:{}", where, cudnnGetErrorString(status),
                                    function_name(call), file, line);
  if (detail[0] != '\0') message += fmt::format(" ({})", detail);
  throw LibraryError(message);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line,
                        const std::string& context) {
  std::string where = context.empty() ? std::string() : fmt::format("{}: ", context);
  throw LibraryError(fmt::format("{}cuBLAS error {} ({}) in {} at {}:{}", where, cublasGetStatusName(status),
                                 cublasGetStatusString(status), function_name(call), file, line));
}

}  // namespace engine::cudnn

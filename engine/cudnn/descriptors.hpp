#pragma once
// RAII owners for the cuDNN / cuBLAS handles and descriptors of one executable. Created at compile
// time, destroyed with the executable; none is created or destroyed by a run.
#include <cublas_v2.h>
#include <cudnn.h>

#include <utility>

#include "engine/cudnn/cudnn_check.hpp"

namespace engine::cudnn {

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Owned {
 public:
  Owned() { CUDNN_CHECK_CTX(Create(&handle_), std::string("creating a cuDNN descriptor")); }
  ~Owned() {
    if (handle_) Destroy(handle_);  // a destructor cannot throw; destroy failures are not actionable
  }
  Owned(Owned&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      if (handle_) Destroy(handle_);
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T get() const { return handle_; }
  operator T() const { return handle_; }  // NOLINT: pass straight to cuDNN calls

 private:
  T handle_ = nullptr;
};

using CudnnHandle = Owned<cudnnHandle_t, cudnnCreate, cudnnDestroy>;
using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Owned<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolingDesc = Owned<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDesc =
    Owned<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;
using OpTensorDesc = Owned<cudnnOpTensorDescriptor_t, cudnnCreateOpTensorDescriptor, cudnnDestroyOpTensorDescriptor>;

class CublasHandle {
 public:
  CublasHandle() { CUBLAS_CHECK_CTX(cublasCreate(&handle_), std::string("creating the cuBLAS handle")); }
  ~CublasHandle() {
    if (handle_) cublasDestroy(handle_);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }
  operator cublasHandle_t() const { return handle_; }  // NOLINT

 private:
  cublasHandle_t handle_ = nullptr;
};

// A packed NCHW float tensor descriptor [n, c, h, w]; host-only, cheap (used per run when n changes).
inline void set_nchw(cudnnTensorDescriptor_t desc, int n, int c, int h, int w, const std::string& context) {
  CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w), context);
}

}  // namespace engine::cudnn

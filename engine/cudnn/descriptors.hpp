#pragma once
// RAII owners for the cuDNN / cuBLAS handles and descriptors of one executable. Created at compile
// time, destroyed with the executable; none is created or destroyed by a run.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

// A cuBLAS or cuBLASLt handle of one executable (cuBLASLt: dense layers, GEMM with the bias and relu
// in its epilogue; cuBLAS: int8's integer GEMMs).
template <typename T, cublasStatus_t (*Create)(T*), cublasStatus_t (*Destroy)(T)>
class CublasOwned {
 public:
  CublasOwned() { CUBLAS_CHECK_CTX(Create(&handle_), std::string("creating a cuBLAS handle")); }
  ~CublasOwned() {
    if (handle_) Destroy(handle_);
  }
  CublasOwned(const CublasOwned&) = delete;
  CublasOwned& operator=(const CublasOwned&) = delete;
  T get() const { return handle_; }
  operator T() const { return handle_; }  // NOLINT

 private:
  T handle_ = nullptr;
};
using CublasHandle = CublasOwned<cublasHandle_t, cublasCreate_v2, cublasDestroy_v2>;
using CublasLtHandle = CublasOwned<cublasLtHandle_t, cublasLtCreate, cublasLtDestroy>;

// How an executable stores activations and parameters: the element type (fp32, or fp16 / bf16 for
// --precision fp16 / bf16) and the layout of [n, c, h, w] values (NCHW, or NHWC, where cuDNN's
// tensor-core convolutions want their operands). Compute is fp32 whatever the storage.
struct Storage {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;

  size_t bytes() const { return dtype == CUDNN_DATA_FLOAT ? 4 : 2; }
  bool nhwc() const { return format == CUDNN_TENSOR_NHWC; }
  // Whether a value of this per-sample shape is stored channels-last: only [C, H, W] values are;
  // vectors and other ranks keep their order.
  bool nhwc_for(const std::vector<int64_t>& shape) const { return nhwc() && shape.size() == 3; }
  bool fp32() const { return dtype == CUDNN_DATA_FLOAT; }
  const char* type_name() const {
    return dtype == CUDNN_DATA_HALF ? "fp16" : dtype == CUDNN_DATA_BFLOAT16 ? "bf16" : "fp32";
  }
  const char* layout_name() const { return nhwc() ? "NHWC" : "NCHW"; }
  // The address `elements` elements past `base`.
  template <typename T>
  T* at(T* base, size_t elements) const {
    using Byte = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
    return reinterpret_cast<T*>(reinterpret_cast<Byte*>(base) + elements * bytes());
  }
};

// A packed [n, c, h, w] tensor descriptor in the storage's type and layout; host-only, cheap (used
// per run when n changes).
inline void set_4d(cudnnTensorDescriptor_t desc, const Storage& s, int n, int c, int h, int w,
                   const std::string& context) {
  CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptor(desc, s.format, s.dtype, n, c, h, w), context);
}

// A packed NCHW tensor descriptor in the storage's type: for views where the layout does not matter
// ([n, elements, 1, 1] rows, [1, c, 1, 1] per-channel parameters).
inline void set_flat(cudnnTensorDescriptor_t desc, const Storage& s, int n, int c, int h, int w,
                     const std::string& context) {
  CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, s.dtype, n, c, h, w), context);
}

// A packed NCHW float tensor descriptor [n, c, h, w].
inline void set_nchw(cudnnTensorDescriptor_t desc, int n, int c, int h, int w, const std::string& context) {
  CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w), context);
}

}  // namespace engine::cudnn

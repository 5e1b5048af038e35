// dense through cuBLAS: y[n, units] = x[n, K] · W^T + bias, W row-major [units, K] (PyTorch Linear).
//
// In cuBLAS's column-major terms the row-major W is a K x units matrix with ld K, x is K x n with ld K
// and y is units x n with ld units, so y = op(W)ᵀ·x: cublasGemmEx(OP_T, OP_N, m = units, n, k = K).
// Precision: FP32 uses CUBLAS_COMPUTE_32F on a handle in CUBLAS_DEFAULT_MATH (no TF32: cuBLAS only uses
// TF32 tensor cores for fp32 when asked); TF32 uses CUBLAS_COMPUTE_32F_FAST_TF32 on a handle in
// CUBLAS_TF32_TENSOR_OP_MATH. The bias is broadcast-added by cudnnAddTensor (cuBLAS has no bias; the
// cuBLASLt epilogue would fuse it, at the price of a per-batch-size heuristic query: not worth it here).
// Determinism: cuBLAS GEMMs give the same bits run to run for the same n on the same GPU with a fixed
// workspace (set once per executable, see cudnn_executable.cpp) and atomics not allowed.
#include <fmt/format.h>

#include <stdexcept>

#include "engine/cudnn/steps.hpp"

namespace engine::cudnn {
namespace {

class DenseStep final : public Step {
 public:
  DenseStep(const BuildContext& ctx, const formats::Node& node, int64_t in_features, const float* x, float* y)
      : Step(node_label(node)), x_(x), y_(y), units_(node.units), k_(int(in_features)) {
    fp32_ = ctx.options.precision == Precision::FP32;
    weight_ = upload(node.weight->values, label_ + " weight");
    if (node.bias) {
      bias_ = upload(node.bias->values, label_ + " bias");
      set_nchw(bias_desc_, 1, units_, 1, 1, label_);
    }
    set_batch(ctx.max_batch);
  }

  void set_batch(int n) override {
    n_ = n;
    if (bias_.size() > 0) set_nchw(y_desc_, n, units_, 1, 1, label_);
  }

  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK_CTX(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, units_, n_, k_, &one, weight_.data(),
                                  CUDA_R_32F, k_, x_, CUDA_R_32F, k_, &zero, y_, CUDA_R_32F, units_,
                                  fp32_ ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                     label_);
    if (bias_.size() > 0)
      CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, &one, bias_desc_, bias_.data(), &one, y_desc_, y_), label_);
  }

  std::string summary() const override {
    return fmt::format("{}: cublasGemmEx {}x{} ({}){}", label_, units_, k_,
                       fp32_ ? "CUBLAS_COMPUTE_32F, fp32" : "CUBLAS_COMPUTE_32F_FAST_TF32, TF32 tensor cores",
                       bias_.size() > 0 ? " + bias via cudnnAddTensor" : "");
  }

 private:
  const float* x_;
  float* y_;
  int units_, k_, n_ = 1;
  bool fp32_ = true;
  gpu::DeviceBuffer<float> weight_, bias_;
  TensorDesc bias_desc_, y_desc_;
};

}  // namespace

std::unique_ptr<Step> make_dense_step(const BuildContext& ctx, const formats::Node& node, int64_t in_features,
                                      const float* x, float* y) {
  return std::make_unique<DenseStep>(ctx, node, in_features, x, y);
}

}  // namespace engine::cudnn

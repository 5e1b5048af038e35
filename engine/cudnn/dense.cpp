// dense through cuBLAS: y[n, units] = x[n, K] · W^T + bias, W row-major [units, K] (PyTorch Linear).
//
// In cuBLAS's column-major terms the row-major W is a K x units matrix with ld K, x is K x n with ld K
// and y is units x n with ld units, so y = op(W)ᵀ·x: cublasGemmEx(OP_T, OP_N, m = units, n, k = K).
// Precision: FP16 / BF16 store x, W and y in that type and sum in fp32 (CUBLAS_COMPUTE_32F: tensor cores).
// FP32 uses CUBLAS_COMPUTE_32F on a handle in CUBLAS_DEFAULT_MATH (no TF32: cuBLAS only uses
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
  DenseStep(const BuildContext& ctx, const formats::Node& node, const Shape& stored_shape, const void* x, void* y)
      : Step(node_label(node)),
        storage_(ctx.storage),
        x_(x),
        y_(y),
        units_(node.units),
        k_(int(formats::element_count(stored_shape))) {
    precision_ = ctx.options.precision;
    // A [C, H, W] input stored NHWC reaches this layer (through a flatten) in (h, w, c) order: the
    // weight's columns are permuted to match, once, here.
    permuted_ = storage_.nhwc_for(stored_shape) && stored_shape[0] > 1 && stored_shape[1] * stored_shape[2] > 1;
    weight_ = upload(permuted_ ? nhwc_filter(node.weight->values, units_, int(stored_shape[0]), int(stored_shape[1]),
                                             int(stored_shape[2]))
                               : node.weight->values,
                     storage_, label_ + " weight");
    if (node.bias) {
      bias_ = upload(node.bias->values, storage_, label_ + " bias");
      set_flat(bias_desc_, storage_, 1, units_, 1, 1, label_);
    }
    set_batch(ctx.max_batch);
  }

  void set_batch(int n) override {
    n_ = n;
    if (bias_.size() > 0) set_flat(y_desc_, storage_, n, units_, 1, 1, label_);
  }

  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t t = data_type();
    CUBLAS_CHECK_CTX(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, units_, n_, k_, &one, weight_.data(), t, k_,
                                  x_, t, k_, &zero, y_, t, units_, compute_type(), CUBLAS_GEMM_DEFAULT),
                     label_);
    if (bias_.size() > 0)
      CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, &one, bias_desc_, bias_.data(), &one, y_desc_, y_), label_);
  }

  std::string summary() const override {
    const char* how = precision_ == Precision::FP32   ? "CUBLAS_COMPUTE_32F, fp32"
                      : precision_ == Precision::TF32 ? "CUBLAS_COMPUTE_32F_FAST_TF32, TF32 tensor cores"
                      : storage_.dtype == CUDNN_DATA_HALF ? "fp16 operands, CUBLAS_COMPUTE_32F, tensor cores"
                                                          : "bf16 operands, CUBLAS_COMPUTE_32F, tensor cores";
    return fmt::format("{}: cublasGemmEx {}x{} ({}){}{}", label_, units_, k_, how,
                       bias_.size() > 0 ? " + bias via cudnnAddTensor" : "",
                       permuted_ ? ", weight columns permuted to the NHWC input's order" : "");
  }

 private:
  cudaDataType_t data_type() const {
    return storage_.dtype == CUDNN_DATA_HALF ? CUDA_R_16F : storage_.dtype == CUDNN_DATA_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
  }
  cublasComputeType_t compute_type() const {
    return precision_ == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }

  Storage storage_;
  const void* x_;
  void* y_;
  int units_, k_, n_ = 1;
  Precision precision_ = Precision::FP32;
  bool permuted_ = false;
  gpu::DeviceBuffer<unsigned char> weight_, bias_;
  TensorDesc bias_desc_, y_desc_;
};

}  // namespace

std::unique_ptr<Step> make_dense_step(const BuildContext& ctx, const formats::Node& node, const Shape& stored_shape,
                                      const void* x, void* y) {
  return std::make_unique<DenseStep>(ctx, node, stored_shape, x, y);
}

}  // namespace engine::cudnn

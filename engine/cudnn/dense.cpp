// dense through cuBLASLt: y[n, units] = act(x[n, K] · W^T + bias), W row-major [units, K] (PyTorch
// Linear), the bias and a following relu applied in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS,
// RELU_BIAS, RELU): one kernel per layer, where a GEMM, a bias pass and a relu pass each read and
// wrote the whole activation.
//
// In cuBLAS's column-major terms the row-major W is a K x units matrix with ld K, x is K x n with ld K
// and y is units x n with ld units, so y = op(W)ᵀ·x: transa = T, transb = N, m = units, k = K.
// Precision: FP16 / BF16 store x, W, bias and y in that type and sum in fp32 (CUBLAS_COMPUTE_32F:
// tensor cores). FP32 is CUBLAS_COMPUTE_32F (no TF32: cuBLASLt only uses TF32 tensor cores for fp32
// when the compute type asks for them); TF32 is CUBLAS_COMPUTE_32F_FAST_TF32.
//
// Algorithm: chosen once at compile time from cublasLtMatmulAlgoGetHeuristic's ranking at max_batch,
// the first entry that cublasLtMatmulAlgoCheck accepts for every batch size checked (each n up to
// kSmallScan, then around powers of two, max_batch - 1 and max_batch; a run checks any other n once,
// on the host, when it first meets it, and runs a size it refuses through cublasGemmEx),
// within the workspace limit (a ranked algorithm that fails is tried again with split-K turned off).
// Split-K keeps both determinism promises: the split count is part of the algorithm, fixed at compile
// time for every n, the split runs along K whatever the number of columns, and cuBLASLt reduces the
// partial sums in a fixed order (the in-place scheme's workspace holds counters that serialise it;
// the other schemes reduce in a separate pass). Where no algorithm qualifies, or CudnnOptions::dense says so, the layer is
// cublasGemmEx + cudnnAddTensor + the relu's own pass, cuBLAS choosing per call. The same algorithm then serves every n:
// each sample's column is computed by the same tile code whatever the number of columns, so a
// sample's result does not depend on the batch it is run in (tested). The workspace is the
// executable's shared one, sized at compile time: a run allocates nothing.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/cudnn/steps.hpp"

namespace engine::cudnn {
namespace {

constexpr int kSmallScan = 64;  // batch sizes checked one by one at compile time; above, around powers of two
constexpr int kHeuristicResults = 16;  // candidates asked of cuBLASLt's ranking
// Workspace an algorithm may ask for: cuBLASLt's kernels for these shapes need little or none.
constexpr size_t kWorkspaceCap = size_t(32) << 20;

template <typename T, cublasStatus_t (*Destroy)(T)>
using LtOwned = std::unique_ptr<std::remove_pointer_t<T>, decltype(Destroy)>;
using MatmulDesc = LtOwned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = LtOwned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtOwned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// The largest power of two (up to 256) dividing the address: what the algorithm may assume.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_BIAS:
      return "BIAS";
    case CUBLASLT_EPILOGUE_RELU:
      return "RELU";
    default:
      return "DEFAULT";
  }
}

class DenseStep final : public Step {
 public:
  DenseStep(const BuildContext& ctx, const formats::Node& node, const Shape& stored_shape, const void* x, void* y,
            const formats::Node* fused_relu)
      : Step(node_label(node)),
        storage_(ctx.storage),
        x_(x),
        y_(y),
        units_(node.units),
        k_(int(formats::element_count(stored_shape))),
        relu_name_(fused_relu ? fused_relu->name : std::string()),
        desc_(nullptr, cublasLtMatmulDescDestroy),
        a_(nullptr, cublasLtMatrixLayoutDestroy),
        b_(nullptr, cublasLtMatrixLayoutDestroy),
        d_(nullptr, cublasLtMatrixLayoutDestroy) {
    precision_ = ctx.options.precision;
    // A [C, H, W] input stored NHWC reaches this layer (through a flatten) in (h, w, c) order: the
    // weight's columns are permuted to match, once, here.
    permuted_ = storage_.nhwc_for(stored_shape) && stored_shape[0] > 1 && stored_shape[1] * stored_shape[2] > 1;
    weight_ = upload(permuted_ ? nhwc_filter(node.weight->values, units_, int(stored_shape[0]), int(stored_shape[1]),
                                             int(stored_shape[2]))
                               : node.weight->values,
                     storage_, label_ + " weight");
    if (node.bias) bias_ = upload(node.bias->values, storage_, label_ + " bias");
    epilogue_ = bias_.size() > 0 ? (relu() ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                 : (relu() ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    if (ctx.cudnn_options.dense == CudnnOptions::Dense::CublasLt) {
      describe();
      choose_algorithm(ctx);
    } else {
      gemm_note_ = "CudnnOptions::dense asks for cublasGemmEx";
    }
    // The cublasGemmEx path, also ready for a batch size cuBLASLt's algorithm would refuse: the bias
    // by cudnnAddTensor, a fused relu in place by the activation step.
    if (bias_.size() > 0) set_flat(bias_desc_, storage_, 1, units_, 1, 1, label_);
    if (fused_relu) relu_step_ = make_activation_step(ctx, *fused_relu, units_, y_, y_);
    set_batch(ctx.max_batch);
  }

  void set_batch(int n) override {
    n_ = n;
    gemm_now_ = !lt_;
    if (lt_) {
      set_columns(n);
      if (!checked_.count(n)) {
        cublasLtMatmulHeuristicResult_t r{};
        const cublasStatus_t s =
            cublasLtMatmulAlgoCheck(lt_handle_, desc_.get(), a_.get(), b_.get(), d_.get(), d_.get(), &algo_, &r);
        if (s == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= workspace_)
          checked_.insert(n);
        else
          gemm_now_ = true;  // a batch size the compile-time checks did not cover and the algorithm refuses
      }
    }
    if (gemm_now_) {
      if (bias_.size() > 0) set_flat(y_desc_, storage_, n, units_, 1, 1, label_);
      if (relu_step_) relu_step_->set_batch(n);
    }
  }

  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    if (gemm_now_) {
      const cudaDataType_t t = data_type();
      CUBLAS_CHECK_CTX(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, units_, n_, k_, &one, weight_.data(), t, k_,
                                    x_, t, k_, &zero, y_, t, units_, compute_type(), CUBLAS_GEMM_DEFAULT),
                       label_);
      if (bias_.size() > 0)
        CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, &one, bias_desc_, bias_.data(), &one, y_desc_, y_), label_);
      if (relu_step_) relu_step_->enqueue(ctx);
      return;
    }
    CUBLAS_CHECK_CTX(cublasLtMatmul(ctx.cublas_lt, desc_.get(), &one, weight_.data(), a_.get(), x_, b_.get(), &zero,
                                    y_, d_.get(), y_, d_.get(), &algo_, ctx.workspace, workspace_, ctx.stream),
                     label_);
  }

  size_t workspace_bytes() const override { return workspace_; }

  std::string summary() const override {
    if (!lt_)
      return fmt::format("{}: cublasGemmEx {}x{} ({}){}{} ({}){}", label_, units_, k_, how(),
                         bias_.size() > 0 ? " + bias via cudnnAddTensor" : "",
                         relu() ? fmt::format(" + relu '{}' in place (cudnnActivationForward)", relu_name_) : "",
                         gemm_note_, permuted_ ? ", weight columns permuted to the NHWC input's order" : "");
    return fmt::format("{}: cublasLtMatmul {}x{} ({}), epilogue {}{}, algorithm {} (tile {}, split-K {}, "
                       "workspace {}){}",
                       label_, units_, k_, how(), epilogue_name(epilogue_),
                       relu() ? fmt::format(" (relu '{}' fused)", relu_name_) : "", algo_id_, tile_id_, split_k_,
                       format_bytes(workspace_), permuted_ ? ", weight columns permuted to the NHWC input's order" : "");
  }

 private:
  const char* how() const {
    return precision_ == Precision::FP32   ? "CUBLAS_COMPUTE_32F, fp32"
           : precision_ == Precision::TF32 ? "CUBLAS_COMPUTE_32F_FAST_TF32, TF32 tensor cores"
           : storage_.dtype == CUDNN_DATA_HALF ? "fp16 operands, CUBLAS_COMPUTE_32F, tensor cores"
                                               : "bf16 operands, CUBLAS_COMPUTE_32F, tensor cores";
  }
  cublasComputeType_t compute_type() const {
    return precision_ == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }
  bool relu() const { return !relu_name_.empty(); }
  cudaDataType_t data_type() const {
    return storage_.dtype == CUDNN_DATA_HALF ? CUDA_R_16F : storage_.dtype == CUDNN_DATA_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
  }

  void describe() {
    const cublasComputeType_t compute =
        precision_ == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t desc = nullptr;
    CUBLAS_CHECK_CTX(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), label_);
    desc_.reset(desc);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK_CTX(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), label_);
    CUBLAS_CHECK_CTX(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), label_);
    CUBLAS_CHECK_CTX(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue_, sizeof(epilogue_)),
                     label_);
    if (bias_.size() > 0) {
      const void* bias = bias_.data();
      const cudaDataType_t bias_type = data_type();
      CUBLAS_CHECK_CTX(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                       label_);
      CUBLAS_CHECK_CTX(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)),
          label_);
    }
    const cudaDataType_t t = data_type();
    cublasLtMatrixLayout_t layout = nullptr;
    CUBLAS_CHECK_CTX(cublasLtMatrixLayoutCreate(&layout, t, uint64_t(k_), uint64_t(units_), int64_t(k_)), label_);
    a_.reset(layout);
    CUBLAS_CHECK_CTX(cublasLtMatrixLayoutCreate(&layout, t, uint64_t(k_), 1, int64_t(k_)), label_);
    b_.reset(layout);
    CUBLAS_CHECK_CTX(cublasLtMatrixLayoutCreate(&layout, t, uint64_t(units_), 1, int64_t(units_)), label_);
    d_.reset(layout);
  }

  // Host only: the B and D layouts for n columns.
  void set_columns(int n) {
    const uint64_t cols = uint64_t(n);
    CUBLAS_CHECK_CTX(cublasLtMatrixLayoutSetAttribute(b_.get(), CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)), label_);
    CUBLAS_CHECK_CTX(cublasLtMatrixLayoutSetAttribute(d_.get(), CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)), label_);
  }

  // Batch sizes an algorithm must accept at compile time (see the file comment).
  static std::vector<int> batches_to_check(int max_batch) {
    std::set<int> ns;
    for (int n = 1; n <= std::min(max_batch, kSmallScan); ++n) ns.insert(n);
    for (int n = 2 * kSmallScan; n < max_batch; n *= 2) ns.insert({n - 1, n, n + 1});
    ns.insert({std::max(max_batch - 1, 1), max_batch});
    for (auto it = ns.begin(); it != ns.end();) it = *it > max_batch ? ns.erase(it) : std::next(it);
    return {ns.begin(), ns.end()};
  }

  // The first algorithm of cuBLASLt's ranking (at max_batch, then at 1) that every checked n accepts.
  void choose_algorithm(const BuildContext& ctx) {
    lt_handle_ = ctx.cublas_lt;
    cublasLtMatmulPreference_t pref_raw = nullptr;
    CUBLAS_CHECK_CTX(cublasLtMatmulPreferenceCreate(&pref_raw), label_);
    Preference pref(pref_raw, cublasLtMatmulPreferenceDestroy);
    const uint64_t limit = std::min(ctx.workspace_limit, kWorkspaceCap);
    CUBLAS_CHECK_CTX(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit,
                                                          sizeof(limit)),
                     label_);
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, weight_.data()},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, x_},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, y_},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, y_}};
    for (const auto& [attribute, pointer] : aligned) {
      const uint32_t bytes = alignment_of(pointer);
      CUBLAS_CHECK_CTX(cublasLtMatmulPreferenceSetAttribute(pref_raw, attribute, &bytes, sizeof(bytes)), label_);
    }

    const std::vector<int> ns = batches_to_check(ctx.max_batch);
    for (int ranked_at : {ctx.max_batch, 1}) {
      set_columns(ranked_at);
      cublasLtMatmulHeuristicResult_t results[kHeuristicResults] = {};
      int found = 0;
      const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt_handle_, desc_.get(), a_.get(), b_.get(), d_.get(), d_.get(),
                                                              pref_raw, kHeuristicResults, results, &found);
      if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK_CTX(s, label_);
      // Each ranked algorithm as it is, then each with split-K turned off.
      for (int i = 0; i < 2 * found; ++i) {
        if (results[i % found].state != CUBLAS_STATUS_SUCCESS) continue;
        cublasLtMatmulAlgo_t algo = results[i % found].algo;
        int split_k = 1;
        size_t written = 0;
        if (i >= found) {
          const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
          if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k, sizeof(split_k)) !=
                  CUBLAS_STATUS_SUCCESS ||
              cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none,
                                                   sizeof(none)) != CUBLAS_STATUS_SUCCESS)
            continue;
        }
        if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k, sizeof(split_k),
                                                 &written) != CUBLAS_STATUS_SUCCESS)
          split_k = 0;  // not reported
        size_t workspace = 0;
        bool ok = true;
        for (int n : ns) {
          set_columns(n);
          cublasLtMatmulHeuristicResult_t r{};
          if (cublasLtMatmulAlgoCheck(lt_handle_, desc_.get(), a_.get(), b_.get(), d_.get(), d_.get(), &algo, &r) !=
                  CUBLAS_STATUS_SUCCESS ||
              r.workspaceSize > limit) {
            ok = false;
            break;
          }
          workspace = std::max(workspace, r.workspaceSize);
        }
        if (!ok) continue;
        algo_ = algo;
        lt_ = true;
        workspace_ = workspace;
        split_k_ = split_k;
        checked_.insert(ns.begin(), ns.end());
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id_, sizeof(algo_id_), &written);
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile_id_, sizeof(tile_id_),
                                             &written);
        return;
      }
    }
    lt_ = false;
    gemm_note_ = fmt::format("cuBLASLt offers no algorithm with epilogue {} that runs every batch size up to {}",
                             epilogue_name(epilogue_), ctx.max_batch);
  }

  Storage storage_;
  const void* x_;
  void* y_;
  int units_, k_;
  std::string relu_name_;  // the fused relu's, or ""
  Precision precision_ = Precision::FP32;
  bool permuted_ = false;
  gpu::DeviceBuffer<unsigned char> weight_, bias_;
  cublasLtEpilogue_t epilogue_ = CUBLASLT_EPILOGUE_DEFAULT;
  cublasLtHandle_t lt_handle_ = nullptr;
  MatmulDesc desc_;
  Layout a_, b_, d_;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
  std::set<int> checked_;  // batch sizes the algorithm is known to run
  // cuBLASLt, or (CudnnOptions::dense, or no algorithm for every batch size) cublasGemmEx + cudnnAddTensor
  // + the relu as its own step; gemm_note_ says why.
  bool lt_ = false;        // cuBLASLt chosen
  bool gemm_now_ = false;  // the current batch size runs through cublasGemmEx
  std::string gemm_note_;
  int n_ = 1;
  TensorDesc bias_desc_, y_desc_;
  std::unique_ptr<Step> relu_step_;
  int split_k_ = 1, algo_id_ = -1, tile_id_ = -1;
};

}  // namespace

std::unique_ptr<Step> make_dense_step(const BuildContext& ctx, const formats::Node& node, const Shape& stored_shape,
                                      const void* x, void* y, const formats::Node* fused_relu) {
  return std::make_unique<DenseStep>(ctx, node, stored_shape, x, y, fused_relu);
}

}  // namespace engine::cudnn

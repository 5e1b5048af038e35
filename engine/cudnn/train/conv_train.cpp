#include "engine/cudnn/train/conv_train.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace engine::cudnn::train {
namespace {

const char* fwd_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    default: return "other";
  }
}
const char* data_name(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ? "ALGO_0" : a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 ? "ALGO_1" : "other";
}
const char* filter_name(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0   ? "ALGO_0"
         : a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ? "ALGO_1"
         : a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 ? "ALGO_3"
                                                    : "other";
}

// Transform-based algorithms: not exact enough for fp32 parity (conv.cpp).
bool transform_based(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transform_based(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transform_based(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}
bool tensor_op(cudnnMathType_t m) { return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION; }

// Batch sizes checked one by one at plan time; above it, a geometric sample at plan time and the
// exact n when set_batch() first meets it (host-only queries).
constexpr int kFullScan = 1024;

std::vector<int> batches_to_check(int max_batch) {
  std::vector<int> ns;
  const int full = std::min(max_batch, kFullScan);
  for (int n = 1; n <= full; ++n) ns.push_back(n);
  for (long long n = 2LL * full; n < max_batch; n *= 2)
    for (long long m : {n - 1, n, n + 1}) ns.push_back(int(m));
  if (max_batch > full) ns.push_back(max_batch);
  return ns;
}

}  // namespace

ConvTrain::ConvTrain(cudnnHandle_t handle, const ConvShape& s, bool has_bias, bool needs_dx, int max_batch,
                     const std::string& label)
    : label_(label), shape_(s), max_batch_(max_batch), has_bias_(has_bias), handle_(handle) {
  in_h_ = s.h, in_w_ = s.w;
  int pad_h = s.pt, pad_w = s.pl;
  if (s.pt != s.pb || s.pl != s.pr) {
    pad_.emplace(handle, s.c, s.h, s.w, s.pt, s.pb, s.pl, s.pr, max_batch, 0.0f, needs_dx, label);
    in_h_ = pad_->padded_height();
    in_w_ = pad_->padded_width();
    pad_h = pad_w = 0;
  }
  CUDNN_CHECK_CTX(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.k, s.c, s.kh, s.kw),
                  label_);
  CUDNN_CHECK_CTX(cudnnSetConvolution2dDescriptor(conv_desc_, pad_h, pad_w, s.sh, s.sw, 1, 1, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT),
                  label_);
  CUDNN_CHECK_CTX(cudnnSetConvolutionMathType(conv_desc_, CUDNN_FMA_MATH), label_);
  set_nchw(bias_desc_, 1, s.k, 1, 1, label_);
  set_nchw(x_desc_, max_batch, s.c, in_h_, in_w_, label_);
  set_nchw(y_desc_, max_batch, s.k, s.oh, s.ow, label_);
  int n = 0, k = 0, oh = 0, ow = 0;
  CUDNN_CHECK_CTX(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &n, &k, &oh, &ow), label_);
  if (k != s.k || oh != s.oh || ow != s.ow)
    throw std::runtime_error(fmt::format("{}: cuDNN computes an output of [{}, {}, {}] where the model has [{}, {}, {}]",
                                         label_, k, oh, ow, s.k, s.oh, s.ow));
  choose_algorithms(handle);
  if (has_bias) plane_sums_ = gpu::DeviceBuffer<float>(size_t(max_batch) * size_t(s.k), "bias-gradient sums of " + label);
  set_batch(max_batch);
}

size_t ConvTrain::workspace_for(int n) {
  set_nchw(x_desc_, n, shape_.c, in_h_, in_w_, label_);
  set_nchw(y_desc_, n, shape_.k, shape_.oh, shape_.ow, label_);
  size_t a = 0, b = 0, c = 0;
  CUDNN_CHECK_CTX(cudnnGetConvolutionForwardWorkspaceSize(handle_, x_desc_, w_desc_, conv_desc_, y_desc_, fwd_, &a),
                  label_);
  CUDNN_CHECK_CTX(
      cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, w_desc_, y_desc_, conv_desc_, x_desc_, bwd_data_, &b),
      label_);
  CUDNN_CHECK_CTX(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle_, x_desc_, y_desc_, conv_desc_, w_desc_,
                                                                 bwd_filter_, &c),
                  label_);
  return std::max({a, b, c});
}

void ConvTrain::choose_algorithms(cudnnHandle_t handle) {
  const std::vector<int> ns = batches_to_check(max_batch_);
  // Whether `query(n)` succeeds for every n; the largest workspace it reports.
  auto every_n = [&](auto query, size_t& most) {
    most = 0;
    for (int n : ns) {
      set_nchw(x_desc_, n, shape_.c, in_h_, in_w_, label_);
      set_nchw(y_desc_, n, shape_.k, shape_.oh, shape_.ow, label_);
      size_t bytes = 0;
      if (query(&bytes) != CUDNN_STATUS_SUCCESS) return false;
      most = std::max(most, bytes);
    }
    return true;
  };
  set_nchw(x_desc_, max_batch_, shape_.c, in_h_, in_w_, label_);
  set_nchw(y_desc_, max_batch_, shape_.k, shape_.oh, shape_.ow, label_);
  constexpr int kMax = 16;
  std::string rejected;
  auto acceptable = [&](const auto& perf) {
    if (perf.status != CUDNN_STATUS_SUCCESS) return false;
    if (perf.determinism != CUDNN_DETERMINISTIC) return false;
    if (tensor_op(perf.mathType)) return false;
    return !transform_based(perf.algo);
  };
  bool found = false;
  size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    int count = 0;
    CUDNN_CHECK_CTX(cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc_, w_desc_, conv_desc_, y_desc_, kMax, &count,
                                                           perf),
                    label_);
    for (int i = 0; i < count && !found; ++i) {
      if (!acceptable(perf[i])) continue;
      found = every_n([&](size_t* b) {
        return cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc_, w_desc_, conv_desc_, y_desc_, perf[i].algo, b);
      }, fwd_ws);
      if (found) fwd_ = perf[i].algo;
    }
    if (!found) throw std::runtime_error(label_ + ": cuDNN offers no deterministic FMA forward algorithm for every batch size");
  }
  found = false;
  set_nchw(x_desc_, max_batch_, shape_.c, in_h_, in_w_, label_);
  set_nchw(y_desc_, max_batch_, shape_.k, shape_.oh, shape_.ow, label_);
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    int count = 0;
    CUDNN_CHECK_CTX(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w_desc_, y_desc_, conv_desc_, x_desc_, kMax,
                                                                &count, perf),
                    label_);
    for (int i = 0; i < count && !found; ++i) {
      if (!acceptable(perf[i])) continue;
      found = every_n([&](size_t* b) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_desc_, y_desc_, conv_desc_, x_desc_, perf[i].algo,
                                                            b);
      }, data_ws);
      if (found) bwd_data_ = perf[i].algo;
    }
    if (!found)
      throw std::runtime_error(label_ + ": cuDNN offers no deterministic FMA backward-data algorithm for every batch size");
  }
  found = false;
  set_nchw(x_desc_, max_batch_, shape_.c, in_h_, in_w_, label_);
  set_nchw(y_desc_, max_batch_, shape_.k, shape_.oh, shape_.ow, label_);
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    int count = 0;
    CUDNN_CHECK_CTX(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x_desc_, y_desc_, conv_desc_, w_desc_, kMax,
                                                                  &count, perf),
                    label_);
    for (int i = 0; i < count && !found; ++i) {
      // ALGO_0 and ALGO_3 add partial sums with atomics; cuDNN reports them non-deterministic, but
      // the rule is stated here too in case a ranking entry says otherwise.
      if (!acceptable(perf[i]) || perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
          perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3)
        continue;
      found = every_n([&](size_t* b) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x_desc_, y_desc_, conv_desc_, w_desc_,
                                                              perf[i].algo, b);
      }, filter_ws);
      if (found) bwd_filter_ = perf[i].algo;
    }
    if (!found)
      throw std::runtime_error(label_ +
                               ": cuDNN offers no deterministic FMA backward-filter algorithm for every batch size");
  }
  workspace_ = std::max({fwd_ws, data_ws, filter_ws});
}

void ConvTrain::set_batch(int n) {
  if (n == n_) return;
  const size_t need = workspace_for(n);  // also describes x and y for n
  if (need > workspace_)
    throw std::runtime_error(fmt::format("{}: a batch of {} needs {} bytes of workspace, more than the {} planned",
                                         label_, n, need, workspace_));
  if (pad_) pad_->set_batch(n);
  n_ = n;
}

void ConvTrain::forward(const TrainContext& ctx, const float* x, const float* w, const float* b, float* y) const {
  if (pad_) {
    pad_->pad(ctx, x);
    x = pad_->padded();
  }
  CUDNN_CHECK_CTX(cudnnConvolutionForward(ctx.cudnn, kOne(), x_desc_, x, w_desc_, w, conv_desc_, fwd_, ctx.workspace,
                                          ctx.workspace_bytes, kZero(), y_desc_, y),
                  label_);
  if (b) CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, kOne(), bias_desc_, b, kOne(), y_desc_, y), label_);
}

void ConvTrain::backward(const TrainContext& ctx, const float* x, const float* dy, const float* w, float* dw,
                         float* db, float* dx, bool accumulate) const {
  const float* xin = pad_ ? pad_->padded() : x;  // forward left the padded copy of this x there
  CUDNN_CHECK_CTX(cudnnConvolutionBackwardFilter(ctx.cudnn, kOne(), x_desc_, xin, y_desc_, dy, conv_desc_, bwd_filter_,
                                                 ctx.workspace, ctx.workspace_bytes, kZero(), w_desc_, dw),
                  label_);
  if (db) {
    // plane_sums[s, k] = sum over the plane's oh*ow positions (column-major: dy is a P x (n*K)
    // matrix, its transpose times ones); db[k] = sum over samples of plane_sums[s, k] (a K x n matrix
    // times ones).
    const int planes = n_ * shape_.k, positions = shape_.oh * shape_.ow;
    CUBLAS_CHECK_CTX(cublasSgemv(ctx.cublas, CUBLAS_OP_T, positions, planes, kOne(), dy, positions, ctx.ones, 1,
                                 kZero(), plane_sums_.data(), 1),
                     label_);
    CUBLAS_CHECK_CTX(cublasSgemv(ctx.cublas, CUBLAS_OP_N, shape_.k, n_, kOne(), plane_sums_.data(), shape_.k, ctx.ones,
                                 1, kZero(), db, 1),
                     label_);
  }
  if (!dx) return;
  if (pad_) {
    CUDNN_CHECK_CTX(cudnnConvolutionBackwardData(ctx.cudnn, kOne(), w_desc_, w, y_desc_, dy, conv_desc_, bwd_data_,
                                                 ctx.workspace, ctx.workspace_bytes, kZero(), x_desc_,
                                                 pad_->padded_gradient()),
                    label_);
    pad_->crop(ctx, dx, accumulate);
  } else {
    CUDNN_CHECK_CTX(cudnnConvolutionBackwardData(ctx.cudnn, kOne(), w_desc_, w, y_desc_, dy, conv_desc_, bwd_data_,
                                                 ctx.workspace, ctx.workspace_bytes, beta_for(accumulate), x_desc_, dx),
                    label_);
  }
}

std::string ConvTrain::summary() const {
  return fmt::format("{}: forward {}, backward data {}, backward filter {} (deterministic, FMA math), workspace {} B{}",
                     label_, fwd_name(fwd_), data_name(bwd_data_), filter_name(bwd_filter_), workspace_,
                     pad_ ? ", asymmetric padding applied explicitly" : "");
}

}  // namespace engine::cudnn::train

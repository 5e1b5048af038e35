// conv2d through cuDNN's convolution forward (legacy C API, see cudnn_backend.cpp for why).
//
// Chunks: a batch whose input or output tensor would pass kMaxTensorElements (steps.hpp) runs as
// several calls of at most call_batch_ samples each, the algorithm chosen for that size: the results
// are those of running the chunks one by one.
//
// Algorithm choice, once per layer shape at compile time, for n = max_batch (or the chunk size):
//   deterministic (default): cuDNN's heuristic ranking (cudnnGetConvolutionForwardAlgorithm_v7), first
//     algorithm that is deterministic, supported, within the workspace limit. The ranking is a pure
//     function of (shape, GPU, cuDNN version), so every compile of the model, in any process, runs the
//     same algorithm and the results are bitwise reproducible from run to run of the engine.
//   nondeterministic: measured (cudnnFindConvolutionForwardAlgorithmEx on the executable's own buffers),
//     fastest supported algorithm of any determinism. Timing noise may pick another algorithm in another
//     process, whose rounding differs in the last bits: the trade the user asked for.
// Either way the choice must also hold for every smaller batch (the last partial batch of a run):
// cudnnGetConvolutionForwardWorkspaceSize is asked for every n in 1..max_batch (see kFullScan), which
// fails for an unsupported configuration and gives the workspace needed; the executable allocates the
// largest requirement once. Results are cached per process by layer shape and options, so compiling
// the same model again (e.g. another batch capacity) re-uses the decision instead of re-measuring.
//
// Precision: FP32 sets CUDNN_FMA_MATH on the convolution descriptor, which restricts cuDNN to FMA
// kernels: on Ampere/Hopper the default math type would let cuDNN run fp32 convolutions on TF32 tensor
// cores (10-bit mantissa). TF32 sets CUDNN_TENSOR_OP_MATH and keeps the math type of the chosen entry.
//
// Fusion: bias + relu → cudnnConvolutionBiasActivationForward (any algorithm); bias alone → the same call
// with CUDNN_ACTIVATION_IDENTITY when the algorithm is IMPLICIT_PRECOMP_GEMM (the only one cuDNN allows
// for identity), else cudnnConvolutionForward + cudnnAddTensor; relu without bias → convolution then an
// in-place cudnnActivationForward.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

#include "engine/cudnn/steps.hpp"

namespace engine::cudnn {
namespace {

// Batch sizes up to this are all checked at compile time; beyond it a geometric sample is checked at
// compile time and the rest when a run first uses that n (host-only query, once per new n).
constexpr int kFullScan = 4096;

struct AlgoChoice {
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  cudnnDeterminism_t determinism = CUDNN_DETERMINISTIC;
  size_t workspace = 0;  // largest over the checked n
  std::string how;       // "heuristic rank 1" / "measured 0.012 ms, fastest of 7"
};

std::mutex g_cache_mutex;
std::map<std::string, AlgoChoice>& algo_cache() {
  static std::map<std::string, AlgoChoice> cache;
  return cache;
}

class ConvStep final : public Step {
 public:
  ConvStep(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape, const void* x, void* y,
           ConvFusion fusion, const std::string& fused_name)
      : Step(node_label(node)), storage_(ctx.storage), y_(y), fuse_relu_(fusion.relu), fused_name_(fused_name) {
    const auto& w = node.window;
    c_ = int(input_shape.at(0));
    h_ = int(input_shape.at(1));
    w_ = int(input_shape.at(2));
    k_ = node.out_channels;
    oh_ = int(node.output_shape.at(1));
    ow_ = int(node.output_shape.at(2));
    max_batch_ = ctx.max_batch;
    const bool symmetric = w.pad_top == w.pad_bottom && w.pad_left == w.pad_right;
    int pad_h = w.pad_top, pad_w = w.pad_left;
    x_ = x;
    in_h_ = h_;
    in_w_ = w_;
    if (!symmetric) {  // zero border in a scratch buffer, then padding 0 in cuDNN
      pad_.emplace(ctx, label_, c_, h_, w_, w, 0.0f, x);
      x_ = pad_->padded();
      in_h_ = pad_->padded_height();
      in_w_ = pad_->padded_width();
      pad_h = pad_w = 0;
    }

    // NHWC storage takes the filter as [k, kh, kw, c] (cuDNN's KRSC).
    weight_ = upload(storage_.nhwc() ? nhwc_filter(node.weight->values, k_, c_, w.kernel_h, w.kernel_w)
                                     : node.weight->values,
                     storage_, label_ + " weight");
    if (node.bias) bias_ = upload(node.bias->values, storage_, label_ + " bias");

    CUDNN_CHECK_CTX(cudnnSetFilter4dDescriptor(filter_desc_, storage_.dtype, storage_.format, k_, c_, w.kernel_h,
                                               w.kernel_w),
                    label_);
    CUDNN_CHECK_CTX(cudnnSetConvolution2dDescriptor(conv_desc_, pad_h, pad_w, w.stride_h, w.stride_w, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                    label_);
    const bool fp32 = ctx.options.precision == Precision::FP32;
    CUDNN_CHECK_CTX(cudnnSetConvolutionMathType(conv_desc_, fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH), label_);
    set_flat(bias_desc_, storage_, 1, k_, 1, 1, label_);
    CUDNN_CHECK_CTX(cudnnSetActivationDescriptor(relu_desc_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                    label_);
    CUDNN_CHECK_CTX(
        cudnnSetActivationDescriptor(identity_desc_, CUDNN_ACTIVATION_IDENTITY, CUDNN_PROPAGATE_NAN, 0.0), label_);

    // A batch whose input or output passes kMaxTensorElements runs in chunks of call_batch_ samples:
    // every call, and the algorithm choice, sees at most that many.
    chunks_.limit(std::max(int64_t(c_) * in_h_ * in_w_, int64_t(k_) * oh_ * ow_), max_batch_);
    call_batch_ = chunks_.size();
    set_descriptors(call_batch_);
    // The output shape cuDNN computes must be the one the model was validated with.
    int n = 0, k = 0, oh = 0, ow = 0;
    CUDNN_CHECK_CTX(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, filter_desc_, &n, &k, &oh, &ow),
                    label_);
    if (n != call_batch_ || k != k_ || oh != oh_ || ow != ow_)
      throw std::runtime_error(fmt::format("{}: cuDNN computes an output of [{}, {}, {}] where the model has "
                                           "[{}, {}, {}]",
                                           label_, k, oh, ow, k_, oh_, ow_));

    choose_algorithm(ctx, fp32);
    CUDNN_CHECK_CTX(cudnnSetConvolutionMathType(conv_desc_, fp32 ? CUDNN_FMA_MATH : choice_.math), label_);
    fused_identity_ = bias_.size() > 0 && !fuse_relu_ && choice_.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  }

  void set_batch(int n) override {
    if (pad_) pad_->set_batch(n);
    chunks_.set(n);
    if (chunks_.has_full()) set_descriptors(chunks_.size());
    const int tail = chunks_.tail();
    if (tail == 0) return;
    describe(x_tail_, y_tail_, tail);
    if (tail > kFullScan && !checked_.count(tail)) {
      // Not covered by the compile-time scan: ask once (host-only) and refuse rather than overrun.
      size_t need = 0;
      CUDNN_CHECK_CTX(cudnnGetConvolutionForwardWorkspaceSize(cudnn_, x_tail_, filter_desc_, conv_desc_, y_tail_,
                                                              choice_.algo, &need),
                      label_);
      if (need > choice_.workspace)
        throw std::runtime_error(fmt::format("{}: {} needs {} of workspace for a batch of {}, more than the {} "
                                             "planned",
                                             label_, algo_name(choice_.algo), format_bytes(need), tail,
                                             format_bytes(choice_.workspace)));
      checked_.insert(tail);
    }
  }

  void enqueue(const RunContext& ctx) override {
    if (pad_) pad_->enqueue(ctx);
    const size_t x_sample = size_t(c_) * size_t(in_h_) * size_t(in_w_);
    const size_t y_sample = size_t(k_) * size_t(oh_) * size_t(ow_);
    chunks_.for_each([&](size_t first, bool tail) {
      enqueue_chunk(ctx, tail ? x_tail_ : x_desc_, storage_.at(x_, first * x_sample), tail ? y_tail_ : y_desc_,
                    storage_.at(y_, first * y_sample));
    });
  }
  size_t workspace_bytes() const override { return choice_.workspace; }

  std::string summary() const override {
    std::string how;
    const bool has_bias = bias_.size() > 0;
    if (has_bias && fuse_relu_)
      how = fmt::format("bias + relu '{}' fused (cudnnConvolutionBiasActivationForward)", fused_name_);
    else if (fused_identity_)
      how = "bias fused (cudnnConvolutionBiasActivationForward, identity)";
    else if (has_bias)
      how = "bias via cudnnAddTensor";
    else
      how = "no bias";
    if (fuse_relu_ && !has_bias) how += fmt::format(", relu '{}' in place after it", fused_name_);
    return fmt::format("{}: {}, {}, {}, workspace {} ({}); [{}, {}, {}] -> [{}, {}, {}]{}; {}", label_,
                       algo_name(choice_.algo),
                       choice_.determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic",
                       math_name(choice_.math), format_bytes(choice_.workspace), choice_.how, c_, h_, w_, k_, oh_,
                       ow_, pad_ ? ", asymmetric padding applied explicitly" : "", how) +
           (call_batch_ < max_batch_ ? fmt::format("; calls of at most {} samples (tensors of at most {} elements)",
                                                   call_batch_, kMaxTensorElements)
                                     : std::string());
  }

 private:
  // One call's worth (at most call_batch_ samples): the convolution with its bias and relu.
  void enqueue_chunk(const RunContext& ctx, cudnnTensorDescriptor_t x_desc, const void* x,
                     cudnnTensorDescriptor_t y_desc, void* y) {
    const float one = 1.0f, zero = 0.0f;
    const bool has_bias = bias_.size() > 0;
    if (has_bias && (fuse_relu_ || fused_identity_)) {
      // y = act(1 * conv(x) + 0 * z + bias); z aliases y. With alpha2 = 0 cuDNN does not use z, but its
      // TF32 engines still read it (an NCHW-to-NHWC copy): y must be initialised memory (initcheck).
      CUDNN_CHECK_CTX(cudnnConvolutionBiasActivationForward(
                          ctx.cudnn, &one, x_desc, x, filter_desc_, weight_.data(), conv_desc_, choice_.algo,
                          ctx.workspace, ctx.workspace_bytes, &zero, y_desc, y, bias_desc_, bias_.data(),
                          fuse_relu_ ? relu_desc_.get() : identity_desc_.get(), y_desc, y),
                      label_);
      return;
    }
    CUDNN_CHECK_CTX(cudnnConvolutionForward(ctx.cudnn, &one, x_desc, x, filter_desc_, weight_.data(), conv_desc_,
                                            choice_.algo, ctx.workspace, ctx.workspace_bytes, &zero, y_desc, y),
                    label_);
    if (has_bias)
      CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, &one, bias_desc_, bias_.data(), &one, y_desc, y), label_);
    if (fuse_relu_)
      CUDNN_CHECK_CTX(cudnnActivationForward(ctx.cudnn, relu_desc_, &one, y_desc, y, &zero, y_desc, y), label_);
  }

  void describe(cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y, int n) {
    set_4d(x, storage_, n, c_, in_h_, in_w_, label_);
    set_4d(y, storage_, n, k_, oh_, ow_, label_);
  }
  // The full chunks' descriptors (also the ones the algorithm choice scans).
  void set_descriptors(int n) { describe(x_desc_, y_desc_, n); }

  std::string cache_key(const BuildContext& ctx) const {
    int device = 0;
    cudaGetDevice(&device);
    const bool act = fuse_relu_;
    return fmt::format("dev{} x[{},{},{}] k{} f{}x{} conv-desc-out[{},{}] pad{} B{} {} {} {} {}", device, c_, in_h_,
                       in_w_, k_, filter_h_, filter_w_, oh_, ow_, pad_key_, call_batch_,
                       precision_name(ctx.options.precision), storage_.layout_name(),
                       ctx.options.deterministic ? "det" : "nondet", act ? "relu" : "");
  }

  // Why an entry cannot be used, or "" when it can (workspace checked for every n).
  std::string try_candidate(const BuildContext& ctx, const cudnnConvolutionFwdAlgoPerf_t& perf, bool fp32) {
    if (perf.status != CUDNN_STATUS_SUCCESS) return cudnnGetErrorString(perf.status);
    if (ctx.options.deterministic && perf.determinism != CUDNN_DETERMINISTIC) return "non-deterministic";
    if (fp32 && (perf.mathType == CUDNN_TENSOR_OP_MATH || perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      return "tensor-op math";
    // FFT and Winograd compute the convolution through transforms whose rounding error grows with
    // the tile, not with the dot product: they break fp32 parity with the reference, so fp32 keeps
    // to direct and GEMM-based algorithms; TF32 mode, which already trades accuracy, may use them.
    if (fp32 && (perf.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || perf.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
                 perf.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
                 perf.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED))
      return "transform-based (FFT/Winograd): not exact enough for fp32";
    if (perf.memory > ctx.workspace_limit) return "workspace " + format_bytes(perf.memory) + " over the limit";
    CUDNN_CHECK_CTX(cudnnSetConvolutionMathType(conv_desc_, fp32 ? CUDNN_FMA_MATH : perf.mathType), label_);
    choice_.algo = perf.algo;
    size_t most = 0;
    checked_.clear();
    auto check = [&](int n) -> std::string {
      set_descriptors(n);
      size_t bytes = 0;
      const cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(cudnn_, x_desc_, filter_desc_, conv_desc_,
                                                                       y_desc_, perf.algo, &bytes);
      if (st != CUDNN_STATUS_SUCCESS) return fmt::format("{} for a batch of {}", cudnnGetErrorString(st), n);
      most = std::max(most, bytes);
      checked_.insert(n);
      return {};
    };
    const int full = std::min(call_batch_, kFullScan);
    for (int n = 1; n <= full; ++n)
      if (auto why = check(n); !why.empty()) return why;
    for (int64_t n = int64_t(full) * 2; n < call_batch_; n *= 2) {
      for (int64_t m : {n - 1, n, n + 1})
        if (auto why = check(int(m)); !why.empty()) return why;
    }
    if (call_batch_ > full)
      if (auto why = check(call_batch_); !why.empty()) return why;
    set_descriptors(call_batch_);
    if (most > ctx.workspace_limit) return "workspace " + format_bytes(most) + " over the limit for some batch";
    choice_.math = fp32 ? CUDNN_FMA_MATH : perf.mathType;
    choice_.determinism = perf.determinism;
    choice_.workspace = most;
    return {};
  }

  // Every measured candidate, for the plan's log line: what the choice was made against.
  static std::string measured_list(const std::vector<cudnnConvolutionFwdAlgoPerf_t>& perfs) {
    std::string s;
    for (const auto& p : perfs)
      s += fmt::format("{}{} {} {} {}", s.empty() ? "" : "; ", algo_name(p.algo),
                       p.status == CUDNN_STATUS_SUCCESS ? fmt::format("{:.4f} ms", p.time) : cudnnGetErrorString(p.status),
                       p.determinism == CUDNN_DETERMINISTIC ? "det" : "nondet", math_name(p.mathType));
    return s;
  }

  void choose_algorithm(const BuildContext& ctx, bool fp32) {
    cudnn_ = ctx.cudnn;
    filter_h_ = 0;
    {
      cudnnDataType_t dt;
      cudnnTensorFormat_t fmt;
      int k, c;
      CUDNN_CHECK_CTX(cudnnGetFilter4dDescriptor(filter_desc_, &dt, &fmt, &k, &c, &filter_h_, &filter_w_), label_);
      int ph, pw, sh, sw, dh, dw;
      cudnnConvolutionMode_t mode;
      cudnnDataType_t ct;
      CUDNN_CHECK_CTX(cudnnGetConvolution2dDescriptor(conv_desc_, &ph, &pw, &sh, &sw, &dh, &dw, &mode, &ct), label_);
      pad_key_ = fmt::format("{}x{}s{}x{}", ph, pw, sh, sw);
    }
    const std::string key = cache_key(ctx);
    {
      std::lock_guard<std::mutex> lock(g_cache_mutex);
      auto it = algo_cache().find(key);
      if (it != algo_cache().end()) {
        choice_ = it->second;
        for (int n = 1; n <= std::min(call_batch_, kFullScan); ++n) checked_.insert(n);
        if (call_batch_ > kFullScan) checked_.insert(call_batch_);
        choice_.how += ", cached";
        return;
      }
    }

    int max_count = 0;
    CUDNN_CHECK_CTX(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn, &max_count), label_);
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(size_t(std::max(max_count, 1)));
    int returned = 0;
    set_descriptors(call_batch_);
    const bool measured = !ctx.options.deterministic;
    if (!measured) {
      CUDNN_CHECK_CTX(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, x_desc_, filter_desc_, conv_desc_, y_desc_,
                                                             int(perfs.size()), &returned, perfs.data()),
                      label_);
    } else {
      // Measured on this executable's own buffers (input, weights, output), so everything read is
      // initialised; the workspace is a temporary buffer of the allowed size, freed afterwards.
      gpu::DeviceBuffer<unsigned char> scratch(ctx.workspace_limit, label_ + ": algorithm search workspace");
      CUDNN_CHECK_CTX(cudnnFindConvolutionForwardAlgorithmEx(ctx.cudnn, x_desc_, x_, filter_desc_, weight_.data(),
                                                             conv_desc_, y_desc_, y_, int(perfs.size()), &returned,
                                                             perfs.data(), scratch.data(), scratch.bytes()),
                      label_);
      CUDA_CHECK_CTX(cudaDeviceSynchronize(), label_ + ": algorithm search");
    }
    perfs.resize(size_t(std::max(returned, 0)));

    std::string rejected;
    for (size_t i = 0; i < perfs.size(); ++i) {
      const std::string why = try_candidate(ctx, perfs[i], fp32);
      if (why.empty()) {
        choice_.how = measured ? fmt::format("measured {:.4f} ms at batch {}, rank {} of {} [{}]", perfs[i].time,
                                             call_batch_, i + 1, perfs.size(), measured_list(perfs))
                               : fmt::format("heuristic rank {} of {}", i + 1, perfs.size());
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        algo_cache()[key] = choice_;
        return;
      }
      rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", algo_name(perfs[i].algo), why);
    }
    throw std::runtime_error(fmt::format("{}: no usable cuDNN forward algorithm ({}{} candidates: {})", label_,
                                         ctx.options.deterministic ? "deterministic, " : "",
                                         precision_name(ctx.options.precision), perfs.size(), rejected));
  }

  Storage storage_;
  const void* x_ = nullptr;  // the node's input, or the padded copy of it
  void* y_ = nullptr;
  bool fuse_relu_ = false;
  bool fused_identity_ = false;
  std::string fused_name_;
  int c_ = 0, h_ = 0, w_ = 0, k_ = 0, oh_ = 0, ow_ = 0, in_h_ = 0, in_w_ = 0, max_batch_ = 1;
  int call_batch_ = 1;  // the most samples one call takes (max_batch_, or a chunk of it)
  BatchChunks chunks_;
  TensorDesc x_tail_, y_tail_;
  int filter_h_ = 0, filter_w_ = 0;
  std::string pad_key_;
  cudnnHandle_t cudnn_ = nullptr;
  std::optional<ExplicitPad> pad_;
  gpu::DeviceBuffer<unsigned char> weight_, bias_;
  TensorDesc x_desc_, y_desc_, bias_desc_;
  FilterDesc filter_desc_;
  ConvDesc conv_desc_;
  ActivationDesc relu_desc_, identity_desc_;
  AlgoChoice choice_;
  std::set<int> checked_;  // batch sizes whose workspace was checked at compile time
};

}  // namespace

std::unique_ptr<Step> make_conv_step(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape,
                                     const void* x, void* y, ConvFusion fusion, const std::string& fused_name) {
  return std::make_unique<ConvStep>(ctx, node, input_shape, x, y, fusion, fused_name);
}

}  // namespace engine::cudnn

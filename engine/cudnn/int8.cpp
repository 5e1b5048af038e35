// --precision int8: conv2d and dense as integer library calls between a quantization and a
// dequantization kernel (engine/gpu/quantize.cu); every other node runs as in fp32 (the executable
// stores fp32 values, NHWC unless a flatten forces NCHW: cudnn_executable.cpp, choose_storage).
//
// The arithmetic is the reference backend's int8 emulation (engine/reference/reduced_precision.hpp):
// post-training quantization, symmetric, zero point 0. Each conv2d / dense reads its input quantized
// per tensor, q = clamp(rne(x / s_in), -127, 127), s_in = calibrated range / 127; its weights are
// quantized per output channel, s_o = max |w_o| / 127; the int8 x int8 products are summed exactly
// in int32 by the library; y = fmaf(acc, s_in * s_o, bias) in fp32 (+ a following relu, folded).
//
// conv2d: cuDNN's INT8_EXT_CONFIG of cudnnConvolutionForward: x and w CUDNN_DATA_INT8 in NHWC
//   (filter KRSC), convolution compute type CUDNN_DATA_INT32, y CUDNN_DATA_FLOAT NHWC, which holds
//   the exact int32 sums (alpha 1, beta 0; exact as floats below 2^24, i.e. up to 1040 taps at full
//   scale). cuDNN's int8 kernels load 4 channels at a time: the input channels are padded to a
//   multiple of 4 (zeros in the quantized input and in the filter), and so are the output channels
//   (zero filters; the dequantization reads the first k of them), so no channel count reaches cuDNN
//   that its int8 configuration table excludes. Algorithm: IMPLICIT_PRECOMP_GEMM, the one cuDNN's
//   table lists for INT8_EXT_CONFIG; should a cuDNN refuse it for a shape, the heuristic ranking's
//   other non-transform entries are tried (integer sums are exact: every algorithm gives the same
//   bits). Asymmetric padding: the fp32 input is padded first (ExplicitPad, zero border), then
//   quantized (0 quantizes to 0). Calls taking N run on chunks of at most kBatchChunk samples (steps.hpp: BatchChunks).
// dense: cublasGemmEx with CUDA_R_8I operands, CUDA_R_32I output, CUBLAS_COMPUTE_32I (int32 alpha and
//   beta). cuBLAS's integer GEMM wants 4-byte-aligned operands and leading dimensions that are
//   multiples of 4, in the "TN" form (A transposed, B not): K (the reduction) is padded to a multiple
//   of 4 with zeros on both sides, the units to a multiple of 4 with zero rows (ldc), and every
//   buffer is a cudaMalloc of its own (256-byte aligned). A dense layer behind a flatten of an NHWC
//   [C, H, W] value has its weight columns permuted to the (h, w, c) order first, as fp16's.
// Plan time does everything (quantized weights, scales and bias uploaded, int8 and int32 scratch
// allocated for max_batch, algorithm and workspace chosen); a run only launches.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <vector>

#include "engine/cudnn/steps.hpp"
#include "engine/gpu/quantize.hpp"

namespace engine::cudnn {
namespace {

constexpr int kFullScan = 4096;  // as conv.cpp: batch sizes checked one by one at compile time

int round_up4(int v) { return (v + 3) / 4 * 4; }

// Weights [rows][per_row] quantized per row as the reference's quantize_per_channel (s = max |w| /
// 127, q = clamp(rne(w / s), -127, 127), 0 where s is 0); q of element i of row r goes to
// out[r * pitch + place(i)] (out zero-filled by the caller). Returns the per-row scales.
template <class Place>
std::vector<float> quantize_rows(const std::vector<float>& w, int rows, int per_row, std::vector<int8_t>& out,
                                 size_t pitch, Place place) {
  std::vector<float> scales(size_t(rows), 0.0f);
  for (int r = 0; r < rows; ++r) {
    float hi = 0;
    for (int i = 0; i < per_row; ++i) hi = std::fmax(hi, std::fabs(w[size_t(r) * size_t(per_row) + size_t(i)]));
    const float s = hi / 127.0f;
    scales[size_t(r)] = s;
    for (int i = 0; i < per_row; ++i) {
      const float v = w[size_t(r) * size_t(per_row) + size_t(i)];
      const float q = s == 0.0f ? 0.0f : std::fmax(-127.0f, std::fmin(127.0f, std::nearbyint(v / s)));
      out[size_t(r) * pitch + size_t(place(i))] = int8_t(q);
    }
  }
  return scales;
}

gpu::DeviceBuffer<unsigned char> upload_bytes(const void* host, size_t bytes, const std::string& what) {
  gpu::DeviceBuffer<unsigned char> buffer(bytes, what);
  if (bytes > 0)
    CUDA_CHECK_CTX(cudaMemcpy(buffer.data(), host, bytes, cudaMemcpyHostToDevice), "uploading " + what);
  return buffer;
}

// The per-channel sum scales s_in * s_o and the bias (0 without one), uploaded as float32.
struct Epilogue {
  gpu::DeviceBuffer<unsigned char> scale, bias;
  float weight_min = 0, weight_max = 0;  // range of s_o, for the plan
};

Epilogue make_epilogue(const std::vector<float>& s_o, float s_in, const formats::Node& node, int rows,
                       const std::string& label) {
  Epilogue e;
  std::vector<float> scale(static_cast<size_t>(rows), 0.0f), bias(static_cast<size_t>(rows), 0.0f);
  for (int r = 0; r < rows; ++r) scale[size_t(r)] = s_in * s_o[size_t(r)];
  if (node.bias)
    for (int r = 0; r < rows; ++r) bias[size_t(r)] = node.bias->values[size_t(r)];
  e.scale = upload(scale, Storage{}, label + " int8 sum scales");
  e.bias = upload(bias, Storage{}, label + " bias");
  if (!s_o.empty()) {
    e.weight_min = *std::min_element(s_o.begin(), s_o.end());
    e.weight_max = *std::max_element(s_o.begin(), s_o.end());
  }
  return e;
}

void check_finite(const formats::Node& node, const std::string& label) {
  for (const auto* t : {&node.weight, &node.bias})
    if (*t)
      for (float v : (*t)->values)
        if (!std::isfinite(v))
          throw std::invalid_argument(label + ": a parameter is not finite, which int8 cannot quantize");
}

class Int8ConvStep final : public Step {
 public:
  Int8ConvStep(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape, const void* x, void* y,
               const Int8Input& in, const std::string& relu_name)
      : Step(node_label(node)), storage_(ctx.storage), y_(y), relu_name_(relu_name), in_(in) {
    const auto& win = node.window;
    check_finite(node, label_);
    c_ = int(input_shape.at(0));
    h_ = int(input_shape.at(1));
    w_ = int(input_shape.at(2));
    k_ = node.out_channels;
    oh_ = int(node.output_shape.at(1));
    ow_ = int(node.output_shape.at(2));
    cp_ = round_up4(c_);
    kp_ = round_up4(k_);
    kh_ = win.kernel_h;
    kw_ = win.kernel_w;
    max_batch_ = ctx.max_batch;
    x_ = x;
    x_unpadded_ = x;
    window_ = win;
    in_h_ = h_;
    in_w_ = w_;
    int pad_h = win.pad_top, pad_w = win.pad_left;
    if (win.pad_top != win.pad_bottom || win.pad_left != win.pad_right) {
      // Zero border around the fp32 input, then padding 0 in cuDNN: the border quantizes to 0.
      pad_.emplace(ctx, label_, c_, h_, w_, win, 0.0f, x);
      x_ = pad_->padded();
      in_h_ = pad_->padded_height();
      in_w_ = pad_->padded_width();
      pad_h = pad_w = 0;
    }

    // Filter [k, c, kh, kw] -> int8 KRSC [kp, kh, kw, cp], zero in the padded channels and filters.
    const int taps = kh_ * kw_;
    std::vector<int8_t> q(size_t(kp_) * size_t(taps) * size_t(cp_), 0);
    const auto s_o = quantize_rows(node.weight->values, k_, c_ * taps, q, size_t(taps) * size_t(cp_), [&](int i) {
      const int ch = i / taps, tap = i % taps;
      return tap * cp_ + ch;
    });
    weight_ = upload_bytes(q.data(), q.size(), label_ + " int8 filter");
    epilogue_ = make_epilogue(s_o, in_.scale, node, k_, label_);
    xq_ = gpu::DeviceBuffer<int8_t>(size_t(max_batch_) * size_t(in_h_) * size_t(in_w_) * size_t(cp_),
                                    label_ + ": int8 input");
    acc_ = gpu::DeviceBuffer<float>(size_t(max_batch_) * size_t(oh_) * size_t(ow_) * size_t(kp_),
                                    label_ + ": int8 convolution sums");
    // Written whole by every run before it is read; zeroed once so no library kernel that touches
    // more than it must (initcheck) ever reads uninitialised memory.
    CUDA_CHECK_CTX(cudaMemsetAsync(xq_.data(), 0, xq_.bytes(), ctx.stream), label_);
    CUDA_CHECK_CTX(cudaMemsetAsync(acc_.data(), 0, acc_.bytes(), ctx.stream), label_);

    CUDNN_CHECK_CTX(cudnnSetFilter4dDescriptor(filter_desc_, CUDNN_DATA_INT8, CUDNN_TENSOR_NHWC, kp_, cp_, kh_, kw_),
                    label_);
    CUDNN_CHECK_CTX(cudnnSetConvolution2dDescriptor(conv_desc_, pad_h, pad_w, win.stride_h, win.stride_w, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_INT32),
                    label_);
    CUDNN_CHECK_CTX(cudnnSetConvolutionMathType(conv_desc_, CUDNN_DEFAULT_MATH), label_);
    chunks_.limit(std::max(int64_t(in_h_) * in_w_ * cp_, int64_t(oh_) * ow_ * kp_));
    describe(full_x_, full_y_, std::min(max_batch_, chunks_.size()));
    int n = 0, k = 0, oh = 0, ow = 0;
    CUDNN_CHECK_CTX(cudnnGetConvolution2dForwardOutputDim(conv_desc_, full_x_, filter_desc_, &n, &k, &oh, &ow), label_);
    if (k != kp_ || oh != oh_ || ow != ow_)
      throw std::runtime_error(fmt::format("{}: cuDNN computes an output of [{}, {}, {}] where the model has "
                                           "[{}, {}, {}] ({} channels padded)",
                                           label_, k, oh, ow, kp_, oh_, ow_, k_));
    try {
      choose_algorithm(ctx);
    } catch (const std::runtime_error& e) {
      cudnn_refusal_ = e.what();  // the patch GEMM may still serve
    }
    plan_patch_gemm(node);
    if (!cudnn_refusal_.empty() && !gemm_available_) throw std::runtime_error(cudnn_refusal_);
    tactic_ = cudnn_refusal_.empty() ? kCudnn : kGemm;
    set_batch(max_batch_);
  }

  // 0: cuDNN's kernel; 1: the patch GEMM with the channels as cuBLAS's m (sums per pixel row); 2: with
  // the pixels as m (sums channel-major), the tall-skinny orientation.
  int tactics() const override { return gemm_available_ ? (cudnn_refusal_.empty() ? 3 : 2) : 1; }
  std::string tactic_name(int t) const override { return tactic_of(t) == kGemm ? "gemm" : tactic_of(t) == kGemmT ? "gemm_t" : "cudnn"; }
  void use_tactic(int t) override { tactic_ = tactic_of(t); }
  void keep_tactic(const std::vector<float>& ms) override {
    tactic_ms_ = ms;
    if (tactic_ != kGemm) acc32_.reset();
    if (tactic_ != kGemmT) acc32t_.reset();
    if (tactic_ != kCudnn) {  // cuDNN's buffers are not needed any more
      xq_.reset();
      acc_.reset();
      weight_.reset();
      pad_.reset();
    } else {
      col_.reset();
      gemm_weight_.reset();
    }
  }

  void set_batch(int n) override {
    n_ = n;
    if (!cudnn_refusal_.empty()) return;  // nothing of cuDNN's to describe
    if (pad_) pad_->set_batch(n);
    chunks_.set(n);
    if (chunks_.has_full()) describe(full_x_, full_y_, chunks_.size());
    if (chunks_.tail() > 0) {
      describe(tail_x_, tail_y_, chunks_.tail());
      if (!checked_.count(chunks_.tail())) {
        // Not covered by the compile-time scan: ask once (host-only) and refuse rather than overrun.
        size_t need = 0;
        CUDNN_CHECK_CTX(cudnnGetConvolutionForwardWorkspaceSize(cudnn_, tail_x_, filter_desc_, conv_desc_, tail_y_,
                                                                algo_, &need),
                        label_);
        if (need > workspace_)
          throw std::runtime_error(fmt::format("{}: {} needs {} of workspace for a batch of {}, more than the {} "
                                               "planned",
                                               label_, algo_name(algo_), format_bytes(need), chunks_.tail(),
                                               format_bytes(workspace_)));
        checked_.insert(chunks_.tail());
      }
    }
  }

  void enqueue(const RunContext& ctx) override {
    if (tactic_ != kCudnn) {
      enqueue_patch_gemm(ctx);
      return;
    }
    if (pad_) pad_->enqueue(ctx);
    const gpu::QuantShape in_shape{n_, in_h_ * in_w_, c_, storage_.nhwc()};
    gpu::quantize_int8(static_cast<const float*>(x_), in_shape, in_.scale, xq_.data(), cp_, ctx.stream, label_);
    const float one = 1.0f, zero = 0.0f;
    const size_t x_sample = size_t(in_h_) * size_t(in_w_) * size_t(cp_);
    const size_t y_sample = size_t(oh_) * size_t(ow_) * size_t(kp_);
    chunks_.for_each([&](size_t first, bool tail) {
      CUDNN_CHECK_CTX(cudnnConvolutionForward(ctx.cudnn, &one, tail ? tail_x_ : full_x_, xq_.data() + first * x_sample,
                                              filter_desc_, weight_.data(), conv_desc_, algo_, ctx.workspace,
                                              ctx.workspace_bytes, &zero, tail ? tail_y_ : full_y_,
                                              acc_.data() + first * y_sample),
                      label_);
    });
    const gpu::QuantShape out_shape{n_, oh_ * ow_, k_, storage_.nhwc()};
    gpu::dequantize_f32(acc_.data(), kp_, reinterpret_cast<const float*>(epilogue_.scale.data()),
                        reinterpret_cast<const float*>(epilogue_.bias.data()), !relu_name_.empty(),
                        static_cast<float*>(y_), out_shape, ctx.stream, label_);
  }

  size_t workspace_bytes() const override { return workspace_; }

  std::string summary() const override {
    std::string timing;
    if (tactic_ms_.size() > 1) {
      timing = fmt::format("; tactics timed at batch {}:", max_batch_);
      for (size_t t = 0; t < tactic_ms_.size(); ++t)
        timing += fmt::format("{} {} {:.3f} ms", t ? "," : "", tactic_name(int(t)), tactic_ms_[t]);
    }
    if (!cudnn_refusal_.empty()) timing += "; cuDNN refused: " + cudnn_refusal_;
    if (!gemm_unavailable_.empty()) timing += "; no patch GEMM: " + gemm_unavailable_;
    if (tactic_ != kCudnn)
      return fmt::format(
          "{}: int8 patches + cublasGemmEx {} {}x{} (quantize_patches_int8: [n * {} pixels][{} taps x {} channels -> {}], "
          "CUDA_R_8I operands, CUDA_R_32I sums, CUBLAS_COMPUTE_32I; {} output channels -> {}); input quantized per "
          "tensor (s = {:.6g}, range {:.6g} of '{}'), weights per output channel ({} scales, {:.3g}..{:.3g}); "
          "dequantize + bias{} (engine/gpu/quantize.cu){}",
          label_, tactic_ == kGemmT ? "(pixels as m, sums channel-major)" : "(channels as m)", kp_, kg_, oh_ * ow_, kh_ * kw_, c_, kg_, k_, kp_, in_.scale, in_.range, in_.value_name, k_,
          epilogue_.weight_min, epilogue_.weight_max, relu_name_.empty() ? "" : fmt::format(" + relu '{}' folded", relu_name_),
          timing);
    return fmt::format(
        "{}: int8 cudnnConvolutionForward (INT8_EXT_CONFIG: int8 NHWC input and KRSC filter, int32 compute, float "
        "sums), {}, {} ({}), workspace {}; input quantized per tensor (s = {:.6g}, range {:.6g} of '{}'), weights "
        "per output channel ({} scales, {:.3g}..{:.3g}); channels {} -> {}, filters {} -> {} (zero padded); "
        "[{}, {}, {}] -> [{}, {}, {}]{}; dequantize + bias{} (engine/gpu/quantize.cu)",
        label_, algo_name(algo_), math_name(math_), how_, format_bytes(workspace_), in_.scale, in_.range,
        in_.value_name, k_, epilogue_.weight_min, epilogue_.weight_max, c_, cp_, k_, kp_, c_, h_, w_, k_, oh_, ow_,
        pad_ ? ", asymmetric padding applied explicitly (fp32, before quantization)" : "",
        relu_name_.empty() ? "" : fmt::format(" + relu '{}' folded", relu_name_)) + timing;
  }

 private:
  void describe(cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y, int n) {
    CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_INT8, n, cp_, in_h_, in_w_), label_);
    CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, kp_, oh_, ow_), label_);
  }

  // The other tactic: the convolution as a GEMM over its patches, cuDNN's IMPLICIT_PRECOMP_GEMM done
  // by hand: quantize_patches_int8 writes each output pixel's taps x channels, quantized, as a row
  // (k = tap * C + c, zeros past the input's edges: any padding, symmetric or not, on the unpadded
  // input), cuBLAS's integer GEMM sums them against the filters, the int32 sums are dequantized. It
  // moves kh * kw times the input's bytes, but cuDNN's int8 kernels run far below the GPU's integer
  // rate on convolutions with few channels (LeNet-5's c1), where the GEMM streams at memory speed.
  // The same integer sums either way; the executable times both and keeps the faster.
  void plan_patch_gemm(const formats::Node& node) {
    const int taps = kh_ * kw_;
    const int64_t rows = int64_t(max_batch_) * oh_ * ow_;
    kg_ = round_up4(taps * c_);
    if (rows > int64_t(std::numeric_limits<int>::max())) return;  // cuBLAS's n is an int
    std::vector<int8_t> q(size_t(kp_) * size_t(kg_), 0);
    quantize_rows(node.weight->values, k_, c_ * taps, q, size_t(kg_), [&](int i) {
      const int ch = i / taps, tap = i % taps;
      return tap * c_ + ch;
    });
    gemm_weight_ = upload_bytes(q.data(), q.size(), label_ + " int8 filter rows");
    try {
      allocate_patch_gemm(rows);
    } catch (const gpu::CudaError& e) {  // no room for the GEMM's buffers: cuDNN's kernel alone
      cudaGetLastError();                // a failed cudaMalloc leaves its error for the next check
      gemm_weight_.reset(), col_.reset(), acc32_.reset(), acc32t_.reset();
      gemm_unavailable_ = e.what();
      if (!cudnn_refusal_.empty()) throw;
      return;
    }
    gemm_available_ = true;
  }

  void allocate_patch_gemm(int64_t rows) {
    col_ = gpu::DeviceBuffer<int8_t>(size_t(rows) * size_t(kg_), label_ + ": int8 patches");
    acc32_ = gpu::DeviceBuffer<int32_t>(size_t(rows) * size_t(kp_), label_ + ": int32 patch sums");
    acc32t_ = gpu::DeviceBuffer<int32_t>(size_t(rows) * size_t(kp_), label_ + ": int32 patch sums, channel-major");
    CUDA_CHECK_CTX(cudaMemset(col_.data(), 0, col_.bytes()), label_);
    CUDA_CHECK_CTX(cudaMemset(acc32_.data(), 0, acc32_.bytes()), label_);
    CUDA_CHECK_CTX(cudaMemset(acc32t_.data(), 0, acc32t_.bytes()), label_);
  }

  void enqueue_patch_gemm(const RunContext& ctx) {
    gpu::PatchShape p;
    p.n = n_;
    p.channels = c_, p.height = h_, p.width = w_;
    p.kernel_h = kh_, p.kernel_w = kw_, p.stride_h = window_.stride_h, p.stride_w = window_.stride_w;
    p.pad_top = window_.pad_top, p.pad_left = window_.pad_left;
    p.out_height = oh_, p.out_width = ow_;
    p.channels_last = storage_.nhwc();
    gpu::quantize_patches_int8(static_cast<const float*>(x_unpadded_), p, in_.scale, col_.data(), kg_, ctx.stream,
                               label_);
    // acc[rows][kp] = col[rows][kg] . W[kp][kg]ᵀ, in cuBLAS's column-major "TN" form as the dense step.
    const int32_t one = 1, zero = 0;
    const int rows = int(n_ * oh_ * ow_);
    if (tactic_ == kGemmT) {
      // acc (rows x kp, column-major: channel-major) = col (kg x rows, ld kg)ᵀ · W (kg x kp, ld kg).
      CUBLAS_CHECK_CTX(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, rows, kp_, kg_, &one, col_.data(), CUDA_R_8I,
                                    kg_, gemm_weight_.data(), CUDA_R_8I, kg_, &zero, acc32t_.data(), CUDA_R_32I, rows,
                                    CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
                       label_);
      gpu::dequantize_i32_channel_major(acc32t_.data(), reinterpret_cast<const float*>(epilogue_.scale.data()),
                                        reinterpret_cast<const float*>(epilogue_.bias.data()), !relu_name_.empty(),
                                        static_cast<float*>(y_), gpu::QuantShape{n_, oh_ * ow_, k_, storage_.nhwc()},
                                        ctx.stream, label_);
      return;
    }
    CUBLAS_CHECK_CTX(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, kp_, rows, kg_, &one, gemm_weight_.data(),
                                  CUDA_R_8I, kg_, col_.data(), CUDA_R_8I, kg_, &zero, acc32_.data(), CUDA_R_32I, kp_,
                                  CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
                     label_);
    gpu::dequantize_i32(acc32_.data(), kp_, reinterpret_cast<const float*>(epilogue_.scale.data()),
                        reinterpret_cast<const float*>(epilogue_.bias.data()), !relu_name_.empty(),
                        static_cast<float*>(y_), gpu::QuantShape{n_, oh_ * ow_, k_, storage_.nhwc()}, ctx.stream,
                        label_);
  }

  // Why (algo, math) cannot serve every chunk size, or "" (workspace_ and checked_ then set).
  std::string try_candidate(const BuildContext& ctx, cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math) {
    CUDNN_CHECK_CTX(cudnnSetConvolutionMathType(conv_desc_, math), label_);
    TensorDesc x, y;
    size_t most = 0;
    std::set<int> checked;
    auto check = [&](int n) -> std::string {
      describe(x, y, n);
      size_t bytes = 0;
      const cudnnStatus_t st =
          cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, x, filter_desc_, conv_desc_, y, algo, &bytes);
      if (st != CUDNN_STATUS_SUCCESS) return fmt::format("{} for a batch of {}", cudnnGetErrorString(st), n);
      most = std::max(most, bytes);
      checked.insert(n);
      return {};
    };
    const int largest = std::min(max_batch_, chunks_.size());  // no call sees more samples than a chunk
    const int full = std::min(largest, kFullScan);
    for (int n = 1; n <= full; ++n)
      if (auto why = check(n); !why.empty()) return why;
    for (int64_t n = int64_t(full) * 2; n < largest; n *= 2)
      for (int64_t m : {n - 1, n, n + 1})
        if (m <= largest)
          if (auto why = check(int(m)); !why.empty()) return why;
    if (largest > full)
      if (auto why = check(largest); !why.empty()) return why;
    if (most > ctx.workspace_limit) return "workspace " + format_bytes(most) + " over the limit for some batch";
    algo_ = algo;
    math_ = math;
    workspace_ = most;
    checked_ = std::move(checked);
    return {};
  }

  void choose_algorithm(const BuildContext& ctx) {
    cudnn_ = ctx.cudnn;
    std::string rejected;
    // cuDNN's table: INT8_EXT_CONFIG runs on IMPLICIT_PRECOMP_GEMM.
    auto why = try_candidate(ctx, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_DEFAULT_MATH);
    if (why.empty()) {
      how_ = "INT8_EXT_CONFIG's algorithm; integer sums: exact, deterministic";
      return;
    }
    rejected = fmt::format("{}: {}", algo_name(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM), why);
    // Otherwise whatever cuDNN's heuristics rank for this configuration (never FFT / Winograd, which
    // would transform the operands in floating point).
    int max_count = 0;
    CUDNN_CHECK_CTX(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn, &max_count), label_);
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(size_t(std::max(max_count, 1)));
    int returned = 0;
    describe(full_x_, full_y_, std::min(max_batch_, chunks_.size()));
    CUDNN_CHECK_CTX(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, full_x_, filter_desc_, conv_desc_, full_y_,
                                                           int(perfs.size()), &returned, perfs.data()),
                    label_);
    perfs.resize(size_t(std::max(returned, 0)));
    for (size_t i = 0; i < perfs.size(); ++i) {
      const auto& p = perfs[i];
      std::string reason;
      if (p.status != CUDNN_STATUS_SUCCESS)
        reason = cudnnGetErrorString(p.status);
      else if (p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
               p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED)
        reason = "transform-based";
      else if (p.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM && p.mathType == CUDNN_DEFAULT_MATH)
        reason = "tried first";
      else
        reason = try_candidate(ctx, p.algo, p.mathType);
      if (reason.empty()) {
        how_ = fmt::format("heuristic rank {} of {} after {}", i + 1, perfs.size(), rejected);
        return;
      }
      rejected += fmt::format("; {} ({}): {}", algo_name(p.algo), math_name(p.mathType), reason);
    }
    throw std::runtime_error(
        fmt::format("{}: cuDNN has no int8 (INT8_EXT_CONFIG) forward algorithm for this layer ({})", label_, rejected));
  }

  Storage storage_;
  const void* x_ = nullptr;  // the fp32 input, or its explicitly padded copy
  const void* x_unpadded_ = nullptr;  // the fp32 input (the patch GEMM pads as it gathers)
  formats::Window2D window_;
  std::string cudnn_refusal_;  // why cuDNN has no int8 algorithm for this layer ("" when it has)
  enum Tactic { kCudnn, kGemm, kGemmT };
  Tactic tactic_of(int t) const { return cudnn_refusal_.empty() ? Tactic(t) : Tactic(t + 1); }
  bool gemm_available_ = false;
  std::string gemm_unavailable_;  // why the patch GEMM's buffers could not be allocated
  Tactic tactic_ = kCudnn;
  int kg_ = 0;                 // taps x channels, padded to a multiple of 4
  std::vector<float> tactic_ms_;
  gpu::DeviceBuffer<unsigned char> gemm_weight_;  // int8 [kp][kg], k = tap * C + c
  gpu::DeviceBuffer<int8_t> col_;                 // [max_batch * oh * ow][kg]
  gpu::DeviceBuffer<int32_t> acc32_;              // [max_batch * oh * ow][kp]
  gpu::DeviceBuffer<int32_t> acc32t_;             // [kp][n * oh * ow] (gemm_t)
  void* y_ = nullptr;
  std::string relu_name_;
  Int8Input in_;
  int c_ = 0, h_ = 0, w_ = 0, k_ = 0, oh_ = 0, ow_ = 0, cp_ = 0, kp_ = 0, kh_ = 0, kw_ = 0;
  int in_h_ = 0, in_w_ = 0, max_batch_ = 1;
  int64_t n_ = 1;
  cudnnHandle_t cudnn_ = nullptr;
  std::optional<ExplicitPad> pad_;
  gpu::DeviceBuffer<unsigned char> weight_;
  Epilogue epilogue_;
  gpu::DeviceBuffer<int8_t> xq_;  // [max_batch, in_h, in_w, cp]
  gpu::DeviceBuffer<float> acc_;  // [max_batch, oh, ow, kp]: the int32 sums as floats
  TensorDesc full_x_, full_y_, tail_x_, tail_y_;
  FilterDesc filter_desc_;
  ConvDesc conv_desc_;
  BatchChunks chunks_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  size_t workspace_ = 0;
  std::string how_;
  std::set<int> checked_;  // chunk sizes whose workspace was checked
};

class Int8DenseStep final : public Step {
 public:
  Int8DenseStep(const BuildContext& ctx, const formats::Node& node, const Shape& stored_shape, const void* x, void* y,
                const Int8Input& in, const std::string& relu_name)
      : Step(node_label(node)),
        storage_(ctx.storage),
        x_(x),
        y_(y),
        relu_name_(relu_name),
        in_(in),
        units_(node.units),
        k_(int(formats::element_count(stored_shape))) {
    check_finite(node, label_);
    kp_ = round_up4(k_);
    up_ = round_up4(units_);
    // A [C, H, W] input stored NHWC reaches this layer (through a flatten) in (h, w, c) order: the
    // weight's columns are permuted to match (per-row quantization does not depend on the order).
    permuted_ = storage_.nhwc_for(stored_shape) && stored_shape[0] > 1 && stored_shape[1] * stored_shape[2] > 1;
    const std::vector<float> w = permuted_ ? nhwc_filter(node.weight->values, units_, int(stored_shape[0]),
                                                         int(stored_shape[1]), int(stored_shape[2]))
                                           : node.weight->values;
    std::vector<int8_t> q(size_t(up_) * size_t(kp_), 0);
    const auto s_o = quantize_rows(w, units_, k_, q, size_t(kp_), [](int i) { return i; });
    weight_ = upload_bytes(q.data(), q.size(), label_ + " int8 weight");
    epilogue_ = make_epilogue(s_o, in_.scale, node, units_, label_);
    xq_ = gpu::DeviceBuffer<int8_t>(size_t(ctx.max_batch) * size_t(kp_), label_ + ": int8 input");
    acc_ = gpu::DeviceBuffer<int32_t>(size_t(ctx.max_batch) * size_t(up_), label_ + ": int32 sums");
    CUDA_CHECK_CTX(cudaMemsetAsync(xq_.data(), 0, xq_.bytes(), ctx.stream), label_);
    CUDA_CHECK_CTX(cudaMemsetAsync(acc_.data(), 0, acc_.bytes(), ctx.stream), label_);
    set_batch(ctx.max_batch);
  }

  void set_batch(int n) override { n_ = n; }

  void enqueue(const RunContext& ctx) override {
    gpu::quantize_int8(static_cast<const float*>(x_), gpu::QuantShape{n_, 1, k_, true}, in_.scale, xq_.data(), kp_,
                       ctx.stream, label_);
    // acc[n][up] = W[up][kp] . xq[n][kp]: in column-major terms acc (up x n, ld up) = Wᵀ (W: kp x up,
    // ld kp) · xq (kp x n, ld kp), the "TN" form cuBLAS's integer kernels take. alpha, beta: int32.
    const int32_t one = 1, zero = 0;
    CUBLAS_CHECK_CTX(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, up_, n_, kp_, &one, weight_.data(), CUDA_R_8I,
                                  kp_, xq_.data(), CUDA_R_8I, kp_, &zero, acc_.data(), CUDA_R_32I, up_,
                                  CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
                     label_);
    gpu::dequantize_i32(acc_.data(), up_, reinterpret_cast<const float*>(epilogue_.scale.data()),
                        reinterpret_cast<const float*>(epilogue_.bias.data()), !relu_name_.empty(),
                        static_cast<float*>(y_), gpu::QuantShape{n_, 1, units_, true}, ctx.stream, label_);
  }

  std::string summary() const override {
    return fmt::format(
        "{}: int8 cublasGemmEx {}x{} (CUDA_R_8I operands, CUDA_R_32I sums, CUBLAS_COMPUTE_32I; K {} -> {}, units {} "
        "-> {} zero padded); input quantized per tensor (s = {:.6g}, range {:.6g} of '{}'), weights per output "
        "channel ({} scales, {:.3g}..{:.3g}){}; dequantize + bias{} (engine/gpu/quantize.cu)",
        label_, units_, k_, k_, kp_, units_, up_, in_.scale, in_.range, in_.value_name, units_, epilogue_.weight_min,
        epilogue_.weight_max, permuted_ ? ", weight columns permuted to the NHWC input's order" : "",
        relu_name_.empty() ? "" : fmt::format(" + relu '{}' folded", relu_name_));
  }

 private:
  Storage storage_;
  const void* x_;
  void* y_;
  std::string relu_name_;
  Int8Input in_;
  int units_, k_, kp_ = 0, up_ = 0;
  int n_ = 1;
  bool permuted_ = false;
  gpu::DeviceBuffer<unsigned char> weight_;  // int8 [up][kp]
  Epilogue epilogue_;
  gpu::DeviceBuffer<int8_t> xq_;    // [max_batch, kp]
  gpu::DeviceBuffer<int32_t> acc_;  // [max_batch, up]
};

}  // namespace

std::unique_ptr<Step> make_int8_conv_step(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape,
                                          const void* x, void* y, const Int8Input& input,
                                          const std::string& relu_name) {
  return std::make_unique<Int8ConvStep>(ctx, node, input_shape, x, y, input, relu_name);
}

std::unique_ptr<Step> make_int8_dense_step(const BuildContext& ctx, const formats::Node& node,
                                           const Shape& stored_shape, const void* x, void* y, const Int8Input& input,
                                           const std::string& relu_name) {
  return std::make_unique<Int8DenseStep>(ctx, node, stored_shape, x, y, input, relu_name);
}

}  // namespace engine::cudnn

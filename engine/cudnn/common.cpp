// Helpers shared by the step files, and the explicit-padding helper (conv and pooling).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <limits>

#include "engine/cudnn/steps.hpp"

namespace engine::cudnn {
namespace {

// The storage type's bits of one value, rounded to nearest even (upload's conversion).
std::array<unsigned char, 4> scalar_bits(float value, const Storage& storage) {
  std::array<unsigned char, 4> bits{};
  if (storage.dtype == CUDNN_DATA_HALF) {
    const __half h = __float2half_rn(value);
    std::memcpy(bits.data(), &h, sizeof h);
  } else if (storage.dtype == CUDNN_DATA_BFLOAT16) {
    const __nv_bfloat16 b = __float2bfloat16_rn(value);
    std::memcpy(bits.data(), &b, sizeof b);
  } else {
    std::memcpy(bits.data(), &value, sizeof value);
  }
  return bits;
}

}  // namespace

std::string node_label(const formats::Node& node) {
  return fmt::format("node '{}' ({})", node.name, formats::op_name(node.op));
}

gpu::DeviceBuffer<unsigned char> upload(const std::vector<float>& values, const Storage& storage,
                                        const std::string& what) {
  std::vector<unsigned char> host(values.size() * storage.bytes());
  for (size_t i = 0; i < values.size(); ++i)
    std::memcpy(host.data() + i * storage.bytes(), scalar_bits(values[i], storage).data(), storage.bytes());
  gpu::DeviceBuffer<unsigned char> buffer(host.size(), what);
  if (!host.empty())
    CUDA_CHECK_CTX(cudaMemcpy(buffer.data(), host.data(), host.size(), cudaMemcpyHostToDevice), "uploading " + what);
  return buffer;
}

std::vector<float> nhwc_filter(const std::vector<float>& w, int k, int c, int h, int width) {
  std::vector<float> out(w.size());
  const size_t hw = size_t(h) * size_t(width);
  for (size_t o = 0; o < size_t(k); ++o)
    for (size_t ch = 0; ch < size_t(c); ++ch)
      for (size_t p = 0; p < hw; ++p) out[(o * hw + p) * size_t(c) + ch] = w[(o * size_t(c) + ch) * hw + p];
  return out;
}

const char* algo_name(cudnnConvolutionFwdAlgo_t algo) {
  switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "CUDNN_CONVOLUTION_FWD_ALGO_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "CUDNN_CONVOLUTION_FWD_ALGO_DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "CUDNN_CONVOLUTION_FWD_ALGO_FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED";
    default: return "CUDNN_CONVOLUTION_FWD_ALGO_(unknown)";
  }
}

const char* math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
    case CUDNN_FMA_MATH: return "FMA math (fp32)";
    default: return "unknown math";
  }
}

std::string format_bytes(size_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (size_t(1) << 20)) return fmt::format("{:.1f} KiB", double(bytes) / 1024);
  return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20));
}

ExplicitPad::ExplicitPad(const BuildContext& ctx, const std::string& label, int channels, int height, int width,
                         const formats::Window2D& window, float border_value, const void* source)
    : label_(label),
      storage_(ctx.storage),
      c_(channels),
      h_(height),
      w_(width),
      pad_top_(window.pad_top),
      pad_left_(window.pad_left),
      padded_h_(height + window.pad_top + window.pad_bottom),
      padded_w_(width + window.pad_left + window.pad_right),
      source_(source),
      scratch_(size_t(ctx.max_batch) * size_t(channels) * size_t(padded_h_) * size_t(padded_w_) * ctx.storage.bytes(),
               label + ": explicit padding buffer") {
  // The whole buffer, interior included, gets the border value once: the border keeps it for ever
  // (runs only write the interior) and nothing ever reads uninitialised memory.
  chunks_.limit(int64_t(c_) * padded_h_ * padded_w_);
  set_batch(ctx.max_batch);
  const size_t sample = size_t(c_) * size_t(padded_h_) * size_t(padded_w_);
  chunks_.for_each([&](size_t first, bool tail) {
    TensorDesc whole;
    set_4d(whole, storage_, tail ? chunks_.tail() : chunks_.size(), c_, padded_h_, padded_w_, label_);
    // A float for fp16 and bf16 tensors too, as alpha and beta (seen with cuDNN 9.14: the value's
    // fp16 bits read as a float made the border 0, which max pooling then picked over negative inputs).
    CUDNN_CHECK_CTX(cudnnSetTensor(ctx.cudnn, whole, storage_.at(scratch_.data(), first * sample), &border_value),
                    label_);
  });
}

void ExplicitPad::describe(int n, cudnnTensorDescriptor_t source, cudnnTensorDescriptor_t interior) {
  set_4d(source, storage_, n, c_, h_, w_, label_);
  // The interior of each padded sample: same dims as the source, strides of the padded tensor.
  const int sample = c_ * padded_h_ * padded_w_;
  if (storage_.nhwc())
    CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptorEx(interior, storage_.dtype, n, c_, h_, w_, sample, 1, padded_w_ * c_, c_),
                    label_);
  else
    CUDNN_CHECK_CTX(cudnnSetTensor4dDescriptorEx(interior, storage_.dtype, n, c_, h_, w_, sample,
                                                 padded_h_ * padded_w_, padded_w_, 1),
                    label_);
}

void ExplicitPad::set_batch(int n) {
  chunks_.set(n);
  if (chunks_.has_full()) describe(chunks_.size(), source_full_, interior_full_);
  if (chunks_.tail() > 0) describe(chunks_.tail(), source_tail_, interior_tail_);
}

void ExplicitPad::enqueue(const RunContext& ctx) {
  const float one = 1.0f, zero = 0.0f;
  const size_t in_sample = size_t(c_) * size_t(h_) * size_t(w_);
  const size_t out_sample = size_t(c_) * size_t(padded_h_) * size_t(padded_w_);
  const size_t corner = size_t(pad_top_) * size_t(padded_w_) + size_t(pad_left_);
  unsigned char* interior = storage_.at(scratch_.data(), storage_.nhwc() ? corner * size_t(c_) : corner);
  chunks_.for_each([&](size_t first, bool tail) {
    CUDNN_CHECK_CTX(cudnnTransformTensor(ctx.cudnn, &one, tail ? source_tail_ : source_full_,
                                         storage_.at(source_, first * in_sample), &zero,
                                         tail ? interior_tail_ : interior_full_, storage_.at(interior, first * out_sample)),
                    label_);
  });
}

}  // namespace engine::cudnn

namespace engine::cudnn {

std::string cudnn_version() {
  const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch since cuDNN 9
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "(unknown version)";
  return fmt::format("{}.{}.{}", major, minor, patch);
}

}  // namespace engine::cudnn

#pragma once
// int8 post-training quantization around a library's integer convolution / GEMM (the cudnn backend's
// --precision int8): the float32 input of a conv2d or dense quantized per tensor into int8, and the
// integer sums dequantized per output channel, plus the bias (and a following relu, when folded).
// The arithmetic is the reference backend's emulation (engine/reference/reduced_precision.hpp):
//   q = clamp(rne(x / s), -127, 127), rounded as the IEEE division (quantize_value.cuh), s == 0 giving 0; a NaN input
//   gives 127 and +-inf +-127, as the emulation's fmin / fmax do;
//   y = fmaf(acc, scale[c], bias[c]) with scale[c] = s_in * s_w[c], one rounding per output.
// Shared by the GPU backends; no library has these calls (cuDNN's INT8 configurations take int8
// operands but neither quantize a float tensor nor apply per-channel scales to a float output).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace engine::gpu {

// n samples of `pixels` positions with `channels` values each, in one of two layouts:
//   channels_last: [n, pixels, channels] (NHWC, or a vector when pixels = 1),
//   else:          [n, channels, pixels] (NCHW).
struct QuantShape {
  int64_t n = 0;
  int pixels = 1, channels = 1;
  bool channels_last = true;
};

// out[n, pixels, padded_channels] (int8, channels-last whatever the input's layout) =
// clamp(rne(in / scale), -127, 127), channels from `channels` up to `padded_channels` written as 0.
// `context` names the node served, for the launch check's message.
void quantize_int8(const float* in, const QuantShape& shape, float scale, int8_t* out, int padded_channels,
                   cudaStream_t stream, const std::string& context);

// The patches of a convolution, quantized: out[n * oh * ow + pixel][padded_k] (int8, row-major) with
// k = (ky * kernel_w + kx) * channels + c, zero outside the input (padding) and past k, from an input
// [n, channels, height, width] stored channels-last (NHWC) or not (NCHW). The rows of an im2col GEMM.
struct PatchShape {
  int64_t n = 0;
  int channels = 1, height = 1, width = 1;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0;
  int out_height = 1, out_width = 1;
  bool channels_last = true;
};
void quantize_patches_int8(const float* in, const PatchShape& shape, float scale, int8_t* out, int padded_k,
                           cudaStream_t stream, const std::string& context);

// out (float32, `shape`'s layout) = fmaf(acc[n, pixel, c], scale[c], bias[c]) (bias may be null: 0),
// then max(., 0) as the reference's relu (NaN to 0) when `relu`; acc is channels-last
// [n, pixels, padded_channels], float (cuDNN's INT8_EXT_CONFIG output) or int32 (cuBLAS's 32I).
void dequantize_f32(const float* acc, int padded_channels, const float* scale, const float* bias, bool relu,
                    float* out, const QuantShape& shape, cudaStream_t stream, const std::string& context);
void dequantize_i32(const int32_t* acc, int padded_channels, const float* scale, const float* bias, bool relu,
                    float* out, const QuantShape& shape, cudaStream_t stream, const std::string& context);
// As dequantize_i32 with the sums channel-major: acc[c * n * pixels + (sample * pixels + pixel)] (the
// column-major output of a GEMM whose rows are the pixels).
void dequantize_i32_channel_major(const int32_t* acc, const float* scale, const float* bias, bool relu, float* out,
                                  const QuantShape& shape, cudaStream_t stream, const std::string& context);

}  // namespace engine::gpu

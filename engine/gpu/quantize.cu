// int8 quantization and dequantization kernels; see quantize.hpp. Grid-stride loops, each run once
// per conv2d / dense layer over its input or output, memory bound. Index arithmetic is most of their
// instructions (a 64-bit division costs ~100 on a GPU): narrow rows (a convolution's pixel: a few
// channels; a patch) take one thread per row and pay it once per row; wide rows (a dense layer's
// input) one thread per element, in 32-bit arithmetic when the tensor allows. Built without
// --use_fast_math (engine/gpu/CMakeLists.txt); quantize_value.cuh rounds x / s exactly as the IEEE
// quotient the reference's emulation computes on the host.
#include "engine/gpu/cuda_check.hpp"
#include "engine/gpu/quantize.hpp"
#include "engine/gpu/quantize_value.cuh"

namespace engine::gpu {
namespace {

dim3 grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return dim3(unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096));
}

// The emulation's fake_quantize without the final * s (quantize_value.cuh: exact, without a division
// per value).
__device__ int8_t quantize_one(float x, float s, float inv_s) { return int8_t(quantize_int8_value(x, s, inv_s)); }

// One thread per (sample, pixel) row, looping over its channels: the index arithmetic (64-bit
// divisions cost ~100 instructions on a GPU) is paid once per row, not once per byte.
__global__ void quantize_kernel(const float* in, int8_t* out, int64_t rows, int pixels, int channels, int padded,
                                bool channels_last, float s) {
  const float inv_s = s != 0.0f ? 1.0f / s : 0.0f;
  for (int64_t np = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; np < rows; np += int64_t(gridDim.x) * blockDim.x) {
    int64_t src = np * channels, step = 1;  // channels-last: this row's channels are adjacent
    if (!channels_last) {
      const int64_t n = np / pixels;
      src = n * channels * pixels + (np - n * pixels);
      step = pixels;
    }
    int8_t* dst = out + np * padded;
    for (int c = 0; c < padded; ++c, src += step) dst[c] = c < channels ? quantize_one(in[src], s, inv_s) : 0;
  }
}

// One thread per output row (n * oh * ow of them): the row's taps x channels in k order, 4 per store.
__global__ void quantize_patches_kernel(const float* in, PatchShape p, float s, int8_t* out, int padded_k,
                                        int64_t rows) {
  const float inv_s = s != 0.0f ? 1.0f / s : 0.0f;
  const int k_real = p.kernel_h * p.kernel_w * p.channels, ohw = p.out_height * p.out_width;
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * blockDim.x) {
    const int64_t img = row / ohw;
    const int pix = int(row - img * ohw), oy = pix / p.out_width, ox = pix - oy * p.out_width;
    const int iy0 = oy * p.stride_h - p.pad_top, ix0 = ox * p.stride_w - p.pad_left;
    const float* base = in + img * int64_t(p.channels) * p.height * p.width;
    unsigned* dst = reinterpret_cast<unsigned*>(out + row * padded_k);
    int c = 0, ky = 0, kx = 0;  // k = (ky * kernel_w + kx) * channels + c: c the fastest
    for (int w = 0, k = 0; w < padded_k / 4; ++w) {
      unsigned word = 0;
      for (int b = 0; b < 4; ++b, ++k) {
        if (k >= k_real) break;
        const int iy = iy0 + ky, ix = ix0 + kx;
        if (iy >= 0 && iy < p.height && ix >= 0 && ix < p.width) {
          const float v = p.channels_last ? base[(int64_t(iy) * p.width + ix) * p.channels + c]
                                          : base[(int64_t(c) * p.height + iy) * p.width + ix];
          word |= unsigned(uint8_t(quantize_one(v, s, inv_s))) << (8 * b);
        }
        if (++c == p.channels) {
          c = 0;
          if (++kx == p.kernel_w) kx = 0, ++ky;
        }
      }
      dst[w] = word;
    }
  }
}

constexpr int kNarrowRow = 32;  // channels up to which a thread takes a whole row

template <typename Index>
__global__ void quantize_elements_kernel(const float* in, int8_t* out, Index count, int pixels, int channels,
                                         int padded, bool channels_last, float s) {
  const float inv_s = s != 0.0f ? 1.0f / s : 0.0f;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < count; i += Index(gridDim.x) * blockDim.x) {
    const int c = int(i % padded);
    const Index np = i / padded;
    if (c >= channels) {
      out[i] = 0;
      continue;
    }
    const Index src = channels_last ? np * channels + c : ((np / pixels) * channels + c) * pixels + np % pixels;
    out[i] = quantize_one(in[src], s, inv_s);
  }
}

template <typename Acc, typename Index>
__global__ void dequantize_elements_kernel(const Acc* acc, int padded, const float* scale, const float* bias,
                                           bool relu, float* out, Index count, int pixels, int channels,
                                           bool channels_last) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < count; i += Index(gridDim.x) * blockDim.x) {
    Index np;
    int c;
    if (channels_last) {
      c = int(i % channels);
      np = i / channels;
    } else {
      const Index per_sample = Index(channels) * pixels;
      const Index n = i / per_sample, r = i % per_sample;
      c = int(r / pixels);
      np = n * pixels + r % pixels;
    }
    float v = fmaf(float(acc[np * padded + c]), scale[c], bias ? bias[c] : 0.0f);
    if (relu) v = v > 0.0f ? v : 0.0f;
    out[i] = v;
  }
}

bool fits_int32(int64_t count) { return count < int64_t(0x7fffffff) - int64_t(4096) * 256; }

// One thread per (sample, pixel) row, as quantize_kernel.
template <typename Acc>
__global__ void dequantize_kernel(const Acc* acc, int padded, const float* scale, const float* bias, bool relu,
                                  float* out, int64_t rows, int pixels, int channels, bool channels_last) {
  for (int64_t np = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; np < rows; np += int64_t(gridDim.x) * blockDim.x) {
    int64_t dst = np * channels, step = 1;
    if (!channels_last) {
      const int64_t n = np / pixels;
      dst = n * channels * pixels + (np - n * pixels);
      step = pixels;
    }
    const Acc* a = acc + np * padded;
    for (int c = 0; c < channels; ++c, dst += step) {
      // float(acc) is exact below 2^24 (any int8 sum of up to 1040 products); one fmaf, one rounding.
      float v = fmaf(float(a[c]), scale[c], bias ? bias[c] : 0.0f);
      if (relu) v = v > 0.0f ? v : 0.0f;
      out[dst] = v;
    }
  }
}

// Channel-major sums: consecutive threads read consecutive rows of each channel's column.
__global__ void dequantize_channel_major_kernel(const int32_t* acc, const float* scale, const float* bias, bool relu,
                                                float* out, int64_t rows, int pixels, int channels,
                                                bool channels_last) {
  for (int64_t np = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; np < rows; np += int64_t(gridDim.x) * blockDim.x) {
    int64_t dst = np * channels, step = 1;
    if (!channels_last) {
      const int64_t n = np / pixels;
      dst = n * channels * pixels + (np - n * pixels);
      step = pixels;
    }
    for (int c = 0; c < channels; ++c, dst += step) {
      float v = fmaf(float(acc[c * rows + np]), scale[c], bias ? bias[c] : 0.0f);
      if (relu) v = v > 0.0f ? v : 0.0f;
      out[dst] = v;
    }
  }
}

template <typename Acc>
void dequantize(const Acc* acc, int padded, const float* scale, const float* bias, bool relu, float* out,
                const QuantShape& s, cudaStream_t stream, const std::string& context) {
  const int64_t rows = s.n * s.pixels;
  if (rows == 0 || s.channels == 0) return;
  if (s.channels > kNarrowRow) {
    const int64_t count = rows * s.channels;
    if (fits_int32(count))
      dequantize_elements_kernel<Acc, int32_t><<<grid_for(count), 256, 0, stream>>>(
          acc, padded, scale, bias, relu, out, int32_t(count), s.pixels, s.channels, s.channels_last);
    else
      dequantize_elements_kernel<Acc, int64_t><<<grid_for(count), 256, 0, stream>>>(
          acc, padded, scale, bias, relu, out, count, s.pixels, s.channels, s.channels_last);
    CUDA_CHECK_LAUNCH(context + ": int8 dequantization");
    return;
  }
  dequantize_kernel<Acc><<<grid_for(rows), 256, 0, stream>>>(acc, padded, scale, bias, relu, out, rows, s.pixels,
                                                             s.channels, s.channels_last);
  CUDA_CHECK_LAUNCH(context + ": int8 dequantization");
}

}  // namespace

void quantize_int8(const float* in, const QuantShape& s, float scale, int8_t* out, int padded_channels,
                   cudaStream_t stream, const std::string& context) {
  const int64_t rows = s.n * s.pixels;
  if (rows == 0 || padded_channels == 0) return;
  if (padded_channels > kNarrowRow) {
    const int64_t count = rows * padded_channels;
    if (fits_int32(count))
      quantize_elements_kernel<int32_t><<<grid_for(count), 256, 0, stream>>>(
          in, out, int32_t(count), s.pixels, s.channels, padded_channels, s.channels_last, scale);
    else
      quantize_elements_kernel<int64_t><<<grid_for(count), 256, 0, stream>>>(
          in, out, count, s.pixels, s.channels, padded_channels, s.channels_last, scale);
    CUDA_CHECK_LAUNCH(context + ": int8 quantization");
    return;
  }
  quantize_kernel<<<grid_for(rows), 256, 0, stream>>>(in, out, rows, s.pixels, s.channels, padded_channels,
                                                      s.channels_last, scale);
  CUDA_CHECK_LAUNCH(context + ": int8 quantization");
}

void quantize_patches_int8(const float* in, const PatchShape& shape, float scale, int8_t* out, int padded_k,
                           cudaStream_t stream, const std::string& context) {
  const int64_t rows = shape.n * shape.out_height * shape.out_width;
  if (rows == 0 || padded_k == 0) return;
  quantize_patches_kernel<<<grid_for(rows), 256, 0, stream>>>(in, shape, scale, out, padded_k, rows);
  CUDA_CHECK_LAUNCH(context + ": int8 quantization of the convolution's patches");
}

void dequantize_f32(const float* acc, int padded_channels, const float* scale, const float* bias, bool relu,
                    float* out, const QuantShape& shape, cudaStream_t stream, const std::string& context) {
  dequantize(acc, padded_channels, scale, bias, relu, out, shape, stream, context);
}

void dequantize_i32(const int32_t* acc, int padded_channels, const float* scale, const float* bias, bool relu,
                    float* out, const QuantShape& shape, cudaStream_t stream, const std::string& context) {
  dequantize(acc, padded_channels, scale, bias, relu, out, shape, stream, context);
}

void dequantize_i32_channel_major(const int32_t* acc, const float* scale, const float* bias, bool relu, float* out,
                                  const QuantShape& s, cudaStream_t stream, const std::string& context) {
  const int64_t rows = s.n * s.pixels;
  if (rows == 0 || s.channels == 0) return;
  dequantize_channel_major_kernel<<<grid_for(rows), 256, 0, stream>>>(acc, scale, bias, relu, out, rows, s.pixels,
                                                                      s.channels, s.channels_last);
  CUDA_CHECK_LAUNCH(context + ": int8 dequantization");
}

}  // namespace engine::gpu

// The fused conv chain: one persistent kernel runs every spatial layer of a model (conv2d, pools,
// activations in epilogues) for a tile of T images per block with all intermediates in shared
// memory, and writes the chain's output flattened (CHW) to global memory. fused_layers.hpp says
// what the parameters mean; docs/perf-fused-gpu.md has the versions, predictions and measurements.
//
// Version 1 (this file): the tiled convolution keeps OCB output channels x 4 output rows of one
// output column per thread in registers (acc[OCB][4]). For each input channel and kernel column it
// loads the 4 + KH - 1 input values of that column once and reuses them for every kernel row, and
// reads each weight row (OCB floats, one float4/float2 broadcast load per 4/2 channels) once per 4
// outputs: 5x5 kernels with OCB = 8 do 160 FMAs per 18 shared-memory loads. Lanes of a warp take
// consecutive output columns, so the input loads of a warp hit consecutive banks.
#include "engine/custom/fused/device_act.cuh"
#include "engine/custom/fused/fused_layers.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::fused {
namespace {

template <int OCB>
__device__ __forceinline__ void load_weight_row(const float* w, float (&v)[OCB]) {
  if constexpr (OCB % 4 == 0) {
#pragma unroll
    for (int i = 0; i < OCB / 4; ++i) {
      const float4 q = reinterpret_cast<const float4*>(w)[i];
      v[4 * i] = q.x; v[4 * i + 1] = q.y; v[4 * i + 2] = q.z; v[4 * i + 3] = q.w;
    }
  } else {
    static_assert(OCB % 2 == 0, "OCB must be even");
#pragma unroll
    for (int i = 0; i < OCB / 2; ++i) {
      const float2 q = reinterpret_cast<const float2*>(w)[i];
      v[2 * i] = q.x; v[2 * i + 1] = q.y;
    }
  }
}

// Stride 1 vertically, any horizontal stride, kernel height KH known at compile time.
template <int KH, int OCB>
__device__ void conv_tiled(const SpatialLayer& L, const float* __restrict__ staged, float* smem, int T) {
  constexpr int YB = kConvRowsPerThread;
  const SmemTensor& I = L.in;
  const SmemTensor& O = L.out;
  const int OH = O.height, OW = O.width, OC = O.channels, C = I.channels;
  const int KW = L.kernel_w, SW = L.stride_w, pitch = I.pitch;
  const int strips = (OH + YB - 1) / YB;
  const int groups = L.oc_padded / OCB;
  const int total = T * groups * strips * OW;
  const float* weights = staged + L.weight_off;
  const float* bias = staged + L.bias_off;
  for (int item = threadIdx.x; item < total; item += blockDim.x) {
    const int ox = item % OW;
    int r = item / OW;
    const int strip = r % strips;
    r /= strips;
    const int g = r % groups;
    const int t = r / groups;
    const int oy0 = strip * YB;

    float acc[OCB][YB];
#pragma unroll
    for (int o = 0; o < OCB; ++o) {
      const float b = bias[g * OCB + o];
#pragma unroll
      for (int y = 0; y < YB; ++y) acc[o][y] = b;
    }
    // Padded coordinates: output row oy reads buffer rows oy .. oy + KH - 1 (the buffer holds the
    // convolution's padding as zeros).
    const float* in0 = smem + I.off + t * I.image + oy0 * pitch + ox * SW;
    const float* w0 = weights + g * (C * KH * KW * OCB);
    for (int c = 0; c < C; ++c) {
      const float* ic = in0 + c * I.channel;
      const float* wc = w0 + c * (KH * KW * OCB);
      for (int kx = 0; kx < KW; ++kx) {
        float v[YB + KH - 1];
#pragma unroll
        for (int i = 0; i < YB + KH - 1; ++i) v[i] = ic[i * pitch + kx];
#pragma unroll
        for (int ky = 0; ky < KH; ++ky) {
          float w[OCB];
          load_weight_row<OCB>(wc + (ky * KW + kx) * OCB, w);
#pragma unroll
          for (int o = 0; o < OCB; ++o)
#pragma unroll
            for (int y = 0; y < YB; ++y) acc[o][y] = fmaf(w[o], v[y + ky], acc[o][y]);
        }
      }
    }
    float* out = smem + O.off + t * O.image + (oy0 + O.pad_top) * O.pitch + ox + O.pad_left;
#pragma unroll
    for (int o = 0; o < OCB; ++o) {
      const int oc = g * OCB + o;
      if (oc >= OC) break;
#pragma unroll
      for (int y = 0; y < YB; ++y)
        if (oy0 + y < OH) out[oc * O.channel + y * O.pitch] = apply_epilogue(acc[o][y], L.epilogue);
    }
  }
}

// Any kernel size and stride: one output pixel x OCB channels per thread.
template <int OCB>
__device__ void conv_generic(const SpatialLayer& L, const float* __restrict__ staged, float* smem, int T) {
  const SmemTensor& I = L.in;
  const SmemTensor& O = L.out;
  const int OH = O.height, OW = O.width, OC = O.channels, C = I.channels;
  const int KH = L.kernel_h, KW = L.kernel_w, SH = L.stride_h, SW = L.stride_w, pitch = I.pitch;
  const int groups = L.oc_padded / OCB;
  const int total = T * groups * OH * OW;
  const float* weights = staged + L.weight_off;
  const float* bias = staged + L.bias_off;
  for (int item = threadIdx.x; item < total; item += blockDim.x) {
    const int ox = item % OW;
    int r = item / OW;
    const int oy = r % OH;
    r /= OH;
    const int g = r % groups;
    const int t = r / groups;
    float acc[OCB];
#pragma unroll
    for (int o = 0; o < OCB; ++o) acc[o] = bias[g * OCB + o];
    const float* in0 = smem + I.off + t * I.image + oy * SH * pitch + ox * SW;
    const float* w0 = weights + g * (C * KH * KW * OCB);
    for (int c = 0; c < C; ++c)
      for (int ky = 0; ky < KH; ++ky)
        for (int kx = 0; kx < KW; ++kx) {
          const float v = in0[c * I.channel + ky * pitch + kx];
          float w[OCB];
          load_weight_row<OCB>(w0 + ((c * KH + ky) * KW + kx) * OCB, w);
#pragma unroll
          for (int o = 0; o < OCB; ++o) acc[o] = fmaf(w[o], v, acc[o]);
        }
    float* out = smem + O.off + t * O.image + (oy + O.pad_top) * O.pitch + ox + O.pad_left;
#pragma unroll
    for (int o = 0; o < OCB; ++o) {
      const int oc = g * OCB + o;
      if (oc < OC) out[oc * O.channel] = apply_epilogue(acc[o], L.epilogue);
    }
  }
}

// Pools read their input with bounds checks (logical padding, as the CPU reference: padded positions
// are never visited by maxpool and add zero to an average).
__device__ void pool_layer(const SpatialLayer& L, float* smem, int T) {
  const SmemTensor& I = L.in;
  const SmemTensor& O = L.out;
  const int OH = O.height, OW = O.width, C = O.channels, H = I.height, W = I.width;
  const int KH = L.kernel_h, KW = L.kernel_w;
  const bool is_max = L.op == SpatialOp::MaxPool;
  const int total = T * C * OH * OW;
  for (int item = threadIdx.x; item < total; item += blockDim.x) {
    const int ox = item % OW;
    int r = item / OW;
    const int oy = r % OH;
    r /= OH;
    const int c = r % C;
    const int t = r / C;
    const int top = oy * L.stride_h - L.pad_top, left = ox * L.stride_w - L.pad_left;
    const int p0 = max(0, -top), p1 = min(KH, H - top);
    const int q0 = max(0, -left), q1 = min(KW, W - left);
    const float* ip = smem + I.off + t * I.image + c * I.channel + (top + I.pad_top) * I.pitch + left + I.pad_left;
    float v;
    if (is_max) {
      v = -__int_as_float(0x7f800000);  // -inf: every window holds at least one value or stays -inf
      for (int p = p0; p < p1; ++p)
        for (int q = q0; q < q1; ++q) {
          const float x = ip[p * I.pitch + q];
          v = (v < x) ? x : v;  // std::max's rule, as the CPU reference
        }
    } else {
      float sum = 0.0f;
      for (int p = p0; p < p1; ++p)
        for (int q = q0; q < q1; ++q) sum += ip[p * I.pitch + q];
      const int inside = max(0, p1 - p0) * max(0, q1 - q0);
      const int divisor = L.count_include_pad ? KH * KW : inside;
      v = divisor > 0 ? sum / float(divisor) : 0.0f;
    }
    smem[O.off + t * O.image + c * O.channel + (oy + O.pad_top) * O.pitch + ox + O.pad_left] =
        apply_epilogue(v, L.epilogue);
  }
}

__device__ void zero_buffer(float* smem, const SmemTensor& b, int T) {
  const int total = T * b.image;
  for (int i = threadIdx.x; i < total; i += blockDim.x) smem[b.off + i] = 0.0f;
}

__device__ void run_conv(const SpatialLayer& L, const float* staged, float* smem, int T) {
  switch (L.variant) {
    case ConvVariant::Generic4: conv_generic<4>(L, staged, smem, T); break;
    case ConvVariant::Generic8: conv_generic<8>(L, staged, smem, T); break;
    case ConvVariant::K2_4: conv_tiled<2, 4>(L, staged, smem, T); break;
    case ConvVariant::K2_6: conv_tiled<2, 6>(L, staged, smem, T); break;
    case ConvVariant::K2_8: conv_tiled<2, 8>(L, staged, smem, T); break;
    case ConvVariant::K3_4: conv_tiled<3, 4>(L, staged, smem, T); break;
    case ConvVariant::K3_6: conv_tiled<3, 6>(L, staged, smem, T); break;
    case ConvVariant::K3_8: conv_tiled<3, 8>(L, staged, smem, T); break;
    case ConvVariant::K5_4: conv_tiled<5, 4>(L, staged, smem, T); break;
    case ConvVariant::K5_6: conv_tiled<5, 6>(L, staged, smem, T); break;
    case ConvVariant::K5_8: conv_tiled<5, 8>(L, staged, smem, T); break;
  }
}

__global__ void __launch_bounds__(kConvThreads)
    conv_chain_kernel(const __grid_constant__ ConvChainParams p, const float* __restrict__ weights,
                      const float* __restrict__ x, float* __restrict__ y, int n) {
  extern __shared__ __align__(16) float smem[];
  // Conv weights and biases, staged once for every tile this block runs.
  for (int i = threadIdx.x; i < p.weight_floats; i += blockDim.x) smem[i] = weights[i];

  const int T = p.tile_images;
  const int tiles = (n + T - 1) / T;
  const int in_elements = p.input_channels * p.input_height * p.input_width;
  const int in_hw = p.input_height * p.input_width;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int first = tile * T;
    const int images = min(T, n - first);
    // The tile's input: global [images][C][H][W] -> the first layer's buffer, consecutive threads
    // reading consecutive floats. Images past n in the last tile are zeros (computed, never stored).
    if (p.input.zero_fill) {
      zero_buffer(smem, p.input, T);
      __syncthreads();
    }
    const float* src = x + size_t(first) * in_elements;
    for (int i = threadIdx.x; i < T * in_elements; i += blockDim.x) {
      const int t = i / in_elements, e = i - t * in_elements;
      const int c = e / in_hw, hw = e - c * in_hw;
      const int row = hw / p.input_width, col = hw - row * p.input_width;
      const float v = t < images ? apply_epilogue(src[i], p.input_epilogue) : 0.0f;
      smem[p.input.off + t * p.input.image + c * p.input.channel + (row + p.input.pad_top) * p.input.pitch + col +
           p.input.pad_left] = v;
    }
    __syncthreads();
    for (int l = 0; l < p.layer_count; ++l) {
      const SpatialLayer& L = p.layers[l];
      if (L.out.zero_fill) {
        zero_buffer(smem, L.out, T);
        __syncthreads();
      }
      if (L.op == SpatialOp::Conv) run_conv(L, smem, smem, T);
      else pool_layer(L, smem, T);
      __syncthreads();
    }
    // The last value, flattened CHW, to global memory: consecutive threads write consecutive floats.
    const SmemTensor& last = p.layer_count > 0 ? p.layers[p.layer_count - 1].out : p.input;
    const int out_hw = last.height * last.width;
    float* dst = y + size_t(first) * p.output_elements;
    for (int i = threadIdx.x; i < images * p.output_elements; i += blockDim.x) {
      const int t = i / p.output_elements, e = i - t * p.output_elements;
      const int c = e / out_hw, hw = e - c * out_hw;
      const int row = hw / last.width, col = hw - row * last.width;
      dst[i] = smem[last.off + t * last.image + c * last.channel + (row + last.pad_top) * last.pitch + col + last.pad_left];
    }
    __syncthreads();  // the next tile overwrites the buffers
  }
}

}  // namespace

void conv_chain_prepare(int smem_bytes, const char* context) {
  CUDA_CHECK_CTX(cudaFuncSetAttribute(conv_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                 context);
}

int conv_chain_blocks_per_sm(int smem_bytes) {
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, conv_chain_kernel, kConvThreads, smem_bytes));
  return blocks;
}

void conv_chain_forward(const ConvChainParams& p, const float* weights, const float* x, float* y, int n, int blocks,
                        cudaStream_t stream, const char* context) {
  if (n <= 0) return;
  const int tiles = (n + p.tile_images - 1) / p.tile_images;
  const int grid = tiles < blocks ? tiles : blocks;
  conv_chain_kernel<<<grid, kConvThreads, size_t(p.smem_floats) * sizeof(float), stream>>>(p, weights, x, y, n);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::fused

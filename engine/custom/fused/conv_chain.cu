// The fused conv chain: one persistent kernel runs every spatial layer of a model (conv2d, pools,
// activations in epilogues) for a tile of T images per block with all intermediates in shared
// memory, and writes the chain's output flattened (CHW) to global memory. fused_layers.hpp says
// what the parameters mean; docs/perf-fused-gpu.md has the versions, predictions and measurements.
//
// Version 1 (commit f8c0d67, measured in docs/perf-fused-gpu.md): the tiled convolution keeps OCB output channels x 4 output rows of one
// output column per thread in registers (acc[OCB][4]). For each input channel and kernel column it
// loads the 4 + KH - 1 input values of that column once and reuses them for every kernel row, and
// reads each weight row (OCB floats, one float4/float2 broadcast load per 4/2 channels) once per 4
// outputs: 5x5 kernels with OCB = 8 do 160 FMAs per 18 shared-memory loads. Lanes of a warp take
// consecutive output columns, so the input loads of a warp hit consecutive banks. 8.9 M images/s on
// LeNet-5; Nsight Compute: FMAs were 27 % of the instructions (integer index arithmetic, the
// separate pooling pass), 8.5 cycles between a warp's instructions at 16 warps per SM.
//
// Version 2 (this file): square kernels known at compile time (the kernel-column loop unrolls too);
// a 2x2 stride-2 pool that follows a tiled conv is done in its epilogue (rows in registers, columns
// with the partner lane through one shuffle), so the conv's full-size output never reaches shared
// memory and its pooling pass and buffer disappear (LeNet-5: 24 KB -> 9.5 KB per image, twice the
// images per block); work-item indices divide by a float reciprocal (a few instructions, exact for
// the shared-memory-sized ranges here) instead of integer division; dense inputs are copied as is.
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

// n / d for 0 <= n < 2^21 (every index here is bounded by the shared memory a block has): the
// float estimate is off by at most one, and one correction step fixes it. Cheaper than the integer
// division sequence the compiler emits for a run-time divisor.
struct Divisor {
  int d;
  float inv;
  __device__ explicit Divisor(int divisor) : d(divisor), inv(1.0f / float(divisor)) {}
  __device__ __forceinline__ int div(int n) const {
    int q = __float2int_rz(__int2float_rn(n) * inv);
    const int r = n - q * d;
    q += (r >= d) - (r < 0);
    return q;
  }
};

// The pooled value of two rows (a, b) of this lane and its partner lane's two (in the other column),
// combined in the same order on both lanes: (left pair) then (right pair).
__device__ __forceinline__ float pool_2x2(float a, float b, bool left_lane, bool is_max) {
  const float mine = is_max ? (a < b ? b : a) : a + b;
  const float other = __shfl_xor_sync(0xffffffffu, mine, 1);
  const float left = left_lane ? mine : other, right = left_lane ? other : mine;
  return is_max ? (left < right ? right : left) : (left + right) * 0.25f;
}

// Square K x K kernel, vertical stride 1, any horizontal stride. Iterates in whole warps (lanes past
// the last item compute a clamped copy and store nothing) so the pooling shuffle has every lane.
template <int K, int OCB>
__device__ void conv_tiled(const SpatialLayer& L, const float* __restrict__ staged, float* smem, int T) {
  constexpr int YB = kConvRowsPerThread;
  const SmemTensor& I = L.in;
  const SmemTensor& O = L.out;
  const bool pooled = L.pool != SpatialOp::Conv;
  const bool is_max = L.pool == SpatialOp::MaxPool;
  // Conv output size (before the folded pool).
  const int OH = pooled ? L.conv_out_h : O.height, OW = pooled ? L.conv_out_w : O.width;
  const int OC = O.channels, C = I.channels;
  const int SW = L.stride_w, pitch = I.pitch;
  const int strips = (OH + YB - 1) / YB;
  const int groups = L.oc_padded / OCB;
  const int total = T * groups * strips * OW;
  const int rounded = (total + 31) / 32 * 32;
  const Divisor by_ow(OW), by_strips(strips), by_groups(groups);
  const float* weights = staged + L.weight_off;
  const float* bias = staged + L.bias_off;
  for (int base = threadIdx.x; base < rounded; base += blockDim.x) {
    const bool valid = base < total;
    // Past the end: the last two items again (the same column pair), results dropped.
    const int item = valid ? base : max(0, total - 2 + (base & 1));
    int r = by_ow.div(item);
    const int ox = item - r * OW;
    int r2 = by_strips.div(r);
    const int strip = r - r2 * strips;
    const int t = by_groups.div(r2);
    const int g = r2 - t * groups;
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
    const float* w0 = weights + g * (C * K * K * OCB);
    for (int c = 0; c < C; ++c) {
      const float* ic = in0 + c * I.channel;
      const float* wc = w0 + c * (K * K * OCB);
#pragma unroll
      for (int kx = 0; kx < K; ++kx) {
        float v[YB + K - 1];
#pragma unroll
        for (int i = 0; i < YB + K - 1; ++i) v[i] = ic[i * pitch + kx];
#pragma unroll
        for (int ky = 0; ky < K; ++ky) {
          float w[OCB];
          load_weight_row<OCB>(wc + (ky * K + kx) * OCB, w);
#pragma unroll
          for (int o = 0; o < OCB; ++o)
#pragma unroll
            for (int y = 0; y < YB; ++y) acc[o][y] = fmaf(w[o], v[y + ky], acc[o][y]);
        }
      }
    }
    if (pooled) {
      // OW is even (plan rule) and item parity is lane parity: lanes 2j, 2j + 1 hold columns ox, ox + 1
      // of the same rows; the even lane stores.
      const bool left = (ox & 1) == 0;
      const int px = ox >> 1, py0 = oy0 >> 1;
      float* out = smem + O.off + t * O.image + (py0 + O.pad_top) * O.pitch + px + O.pad_left;
#pragma unroll
      for (int o = 0; o < OCB; ++o) {
        const int oc = g * OCB + o;
#pragma unroll
        for (int y = 0; y < YB / 2; ++y) {
          const float a = apply_epilogue(acc[o][2 * y], L.epilogue), b = apply_epilogue(acc[o][2 * y + 1], L.epilogue);
          const float p = pool_2x2(a, b, left, is_max);
          if (valid && left && oc < OC && py0 + y < O.height)
            out[oc * O.channel + y * O.pitch] = apply_epilogue(p, L.pool_epilogue);
        }
      }
    } else if (valid) {
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
  const Divisor by_ow(OW), by_oh(OH), by_groups(groups);
  const float* weights = staged + L.weight_off;
  const float* bias = staged + L.bias_off;
  for (int item = threadIdx.x; item < total; item += blockDim.x) {
    int r = by_ow.div(item);
    const int ox = item - r * OW;
    const int r2 = by_oh.div(r);
    const int oy = r - r2 * OH;
    const int t = by_groups.div(r2);
    const int g = r2 - t * groups;
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
  const Divisor by_ow(OW), by_oh(OH), by_c(C);
  for (int item = threadIdx.x; item < total; item += blockDim.x) {
    int r = by_ow.div(item);
    const int ox = item - r * OW;
    const int r2 = by_oh.div(r);
    const int oy = r - r2 * OH;
    const int t = by_c.div(r2);
    const int c = r2 - t * C;
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

__global__ void __launch_bounds__(kConvThreads, 2)
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
    // Layers run over the tile's real images only (a batch of 1 does one image's work); the
    // buffers keep room for T.
    if (p.input.zero_fill) {
      zero_buffer(smem, p.input, T);
      __syncthreads();
    }
    const float* src = x + size_t(first) * in_elements;
    if (p.input.dense) {
      // Same layout in both places: a straight copy (image stride rounded to 4 floats in shared memory).
      const Divisor by_elements(in_elements);
      for (int i = threadIdx.x; i < images * in_elements; i += blockDim.x) {
        const int t = by_elements.div(i), e = i - t * in_elements;
        smem[p.input.off + t * p.input.image + e] = apply_epilogue(src[i], p.input_epilogue);
      }
    } else {
      const Divisor by_elements(in_elements), by_hw(in_hw), by_w(p.input_width);
      for (int i = threadIdx.x; i < images * in_elements; i += blockDim.x) {
        const int t = by_elements.div(i), e = i - t * in_elements;
        const int c = by_hw.div(e), hw = e - c * in_hw;
        const int row = by_w.div(hw), col = hw - row * p.input_width;
        const float v = apply_epilogue(src[i], p.input_epilogue);
        smem[p.input.off + t * p.input.image + c * p.input.channel + (row + p.input.pad_top) * p.input.pitch + col +
             p.input.pad_left] = v;
      }
    }
    __syncthreads();
    for (int l = 0; l < p.layer_count; ++l) {
      const SpatialLayer& L = p.layers[l];
      if (L.out.zero_fill) {
        zero_buffer(smem, L.out, T);
        __syncthreads();
      }
      if (L.op == SpatialOp::Conv) run_conv(L, smem, smem, images);
      else pool_layer(L, smem, images);
      __syncthreads();
    }
    // The last value, flattened CHW, to global memory: consecutive threads write consecutive floats.
    const SmemTensor& last = p.layer_count > 0 ? p.layers[p.layer_count - 1].out : p.input;
    const int out_hw = last.height * last.width;
    float* dst = y + size_t(first) * p.output_elements;
    const Divisor by_elements(p.output_elements), by_hw(out_hw), by_w(last.width);
    for (int i = threadIdx.x; i < images * p.output_elements; i += blockDim.x) {
      const int t = by_elements.div(i), e = i - t * p.output_elements;
      if (last.dense) {
        dst[i] = smem[last.off + t * last.image + e];
      } else {
        const int c = by_hw.div(e), hw = e - c * out_hw;
        const int row = by_w.div(hw), col = hw - row * last.width;
        dst[i] = smem[last.off + t * last.image + c * last.channel + (row + last.pad_top) * last.pitch + col + last.pad_left];
      }
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

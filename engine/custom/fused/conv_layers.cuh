#pragma once
// The layers of the fused conv chain as device functions, shared by the tiled-batch kernel
// (conv_chain.cu) and the one-image-per-block kernel for small batches (image_chain.cu). Every
// function loops over its work items with the whole block (threadIdx.x, blockDim.x) over the first
// T images of the block's shared-memory buffers. The summation order of an output never depends on
// how many outputs a thread computes (OCB, YB): bias first, then input channel, kernel column,
// kernel row (tiled) or input channel, kernel row, kernel column (generic), so a kernel that picks
// smaller work items for small batches gives the same bits.
#include <type_traits>

#include "engine/custom/fused/device_act.cuh"
#include "engine/custom/fused/fused_layers.hpp"

// Phase stamps for the batch-1 study: image_chain.cu's trace build defines it; nothing otherwise.
#ifndef CONV_TRACE_STAMP
#define CONV_TRACE_STAMP() \
  do {                     \
  } while (0)
#endif

#ifndef CONV_WARP_MARK
#define CONV_WARP_MARK(kind, fdep) \
  do {                             \
  } while (0)
#endif

namespace engine::custom::fused {

// Where a layer's outputs go: this block's shared memory (the tiled kernels, the image chain on one
// block), or also every other block of a cluster that shares the image (image_chain.cu).
struct LocalStore {
  __device__ __forceinline__ void operator()(float* p, float v) const { *p = v; }
};

// The share of `total` work items (rounded up to whole `unit`s) that part `part` of `parts` runs:
// contiguous ranges [lo, hi). Only a cluster splits a layer (its Store is not LocalStore); every
// other caller runs [0, total) with no arithmetic at all (the tiled kernel's registers are tight).
template <class Store>
struct WorkRange {
  int lo = 0, hi;
  __device__ WorkRange(int total, int unit, int part, int parts) : hi(total) {
    if constexpr (!std::is_same_v<Store, LocalStore>) {
      const int units = (total + unit - 1) / unit;
      const int per = (units + parts - 1) / parts * unit;
      lo = min(total, part * per);
      hi = min(total, lo + per);
    }
  }
};

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
  // __frcp_rn is the correctly rounded reciprocal, the same value as 1.0f / d without the IEEE
  // division's subroutine (on the batch-1 critical path at every layer's start).
#ifdef __CUDA_ARCH__
  __device__ explicit Divisor(int divisor) : d(divisor), inv(__frcp_rn(float(divisor))) {}
#else
  __device__ explicit Divisor(int divisor) : d(divisor), inv(1.0f / float(divisor)) {}
#endif
  __device__ Divisor(int divisor, float reciprocal) : d(divisor), inv(reciprocal) {}
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

// Square K x K kernel, vertical stride 1, any horizontal stride; YB output rows per thread (even). Iterates in whole warps (lanes past
// the last item compute a clamped copy and store nothing) so the pooling shuffle has every lane.
// Items in order: output column fastest, then row strip, then channel group, then image; with
// kGroupsInner (the image chain, one image per block) column, channel group, strip: the lanes of
// other groups at the same columns read the same input words (a broadcast), so a warp's reads span
// fewer rows and meet less often on a bank (docs/design/custom-fused.md). Same sums.
// OCU < OCB (the image chain's clusters at batch 1): an item computes OCU of its
// group's OCB channels (weights still packed for OCB), so a layer has OCB / OCU times the items,
// each a shorter chain of instructions and fewer outputs to activate and send; the channel index
// goes with the group (group-major), and every output's sum runs in the same order.
// per > 0 (the image chain's clusters): this block's items are [part * per, part * per + per) and
// the index reciprocals come from the plan (SpatialLayer::inv_*), instead of being worked out here.
// kOneChannelWeights (OCU = 1 only): the item's weights come from L.split_weight_off, one input
// channel's K * K taps as float4 loads at the channel's start (the plan's second copy) instead of a
// scalar load per tap: the same values in the same FMAs.
template <int K, int OCB, int YB, bool kGroupsInner = false, class Store = LocalStore, int OCU = OCB,
          bool kOneChannelWeights = false>
__device__ void conv_tiled(const SpatialLayer& L, const float* __restrict__ staged, float* smem, int T,
                           Store store = {}, int part = 0, int parts = 1, int per = 0) {
  static_assert(OCB % OCU == 0, "an item's channels divide its group's");
  constexpr int kSplit = OCB / OCU;
  const SmemTensor& I = L.in;
  const SmemTensor& O = L.out;
  const bool pooled = L.pool != SpatialOp::Conv;
  const bool is_max = L.pool == SpatialOp::MaxPool;
  // Conv output size (before the folded pool).
  const int OH = pooled ? L.conv_out_h : O.height, OW = pooled ? L.conv_out_w : O.width;
  const int OC = O.channels, C = I.channels;
  const int SW = L.stride_w, pitch = I.pitch;
  const int strips = (OH + YB - 1) / YB;
  const int groups = L.oc_padded / OCB * kSplit;  // of OCU channels each
  const int total = T * groups * strips * OW;
  const int rounded = (total + 31) / 32 * 32;
  const bool planned = !std::is_same_v<Store, LocalStore> && per > 0;  // a cluster's only
  const Divisor by_ow = planned ? Divisor(OW, L.inv_ow) : Divisor(OW);
  const Divisor by_strips = planned ? Divisor(strips, L.inv_strips) : Divisor(strips);
  const Divisor by_groups = planned ? Divisor(groups, L.inv_groups[kSplit - 1]) : Divisor(groups);
  const float* weights = staged + L.weight_off;
  const float* bias = staged + L.bias_off;
  const unsigned epi = L.epilogue.code, pool_epi = L.pool_epilogue.code;  // once per layer, in registers
  int lo, hi;  // whole warps: the pooling shuffle needs every lane
  if (planned) {
    lo = min(rounded, part * per);
    hi = min(rounded, lo + per);
  } else {
    const WorkRange<Store> range(rounded, 32, part, parts);
    lo = range.lo;
    hi = range.hi;
  }
  CONV_TRACE_STAMP();
  CONV_WARP_MARK(0, 0.0f);
  for (int base = lo + threadIdx.x; base < hi; base += blockDim.x) {
    const bool valid = base < total;
    // Past the end: the last two items again (the same column pair), results dropped.
    const int item = valid ? base : max(0, total - 2 + (base & 1));
    const int r = by_ow.div(item);
    const int ox = item - r * OW;
    int strip, g, t;
    if constexpr (kGroupsInner) {
      const int r2 = by_groups.div(r);
      g = r - r2 * groups;
      t = by_strips.div(r2);
      strip = r2 - t * strips;
    } else {
      const int r2 = by_strips.div(r);
      strip = r - r2 * strips;
      t = by_groups.div(r2);
      g = r2 - t * groups;
    }
    const int oy0 = strip * YB;
    const int c0 = g * OCU;  // the item's first output channel (g counts groups of OCU)

    float acc[OCU][YB];
#pragma unroll
    for (int o = 0; o < OCU; ++o) {
      const float b = bias[c0 + o];
#pragma unroll
      for (int y = 0; y < YB; ++y) acc[o][y] = b;
    }
    CONV_WARP_MARK(4, acc[0][0]);
    // Padded coordinates: output row oy reads buffer rows oy .. oy + KH - 1 (the buffer holds the
    // convolution's padding as zeros).
    const float* in0 = smem + I.off + t * I.image + oy0 * pitch + ox * SW;
    // The packed group's weights ([group][c][ky][kx][OCB]), from this item's first channel in it.
    const float* w0 = weights + (g / kSplit) * (C * K * K * OCB) + (g % kSplit) * OCU;
    static_assert(!kOneChannelWeights || OCU == 1, "the one-channel copy serves one-channel items");
    constexpr int kTaps = (K * K + 3) / 4 * 4;
    const float* w1 = staged + L.split_weight_off + c0 * C * kTaps;  // used with kOneChannelWeights only
    for (int c = 0; c < C; ++c) {
      const float* ic = in0 + c * I.channel;
      const float* wc = w0 + c * (K * K * OCB);
      float wt[kOneChannelWeights ? kTaps : 1];
      if constexpr (kOneChannelWeights) {
#pragma unroll
        for (int i = 0; i < kTaps / 4; ++i) {
          const float4 q = reinterpret_cast<const float4*>(w1 + c * kTaps)[i];
          wt[4 * i] = q.x;
          wt[4 * i + 1] = q.y;
          wt[4 * i + 2] = q.z;
          wt[4 * i + 3] = q.w;
        }
      }
#pragma unroll
      for (int kx = 0; kx < K; ++kx) {
        float v[YB + K - 1];
#pragma unroll
        for (int i = 0; i < YB + K - 1; ++i) v[i] = ic[i * pitch + kx];
#pragma unroll
        for (int ky = 0; ky < K; ++ky) {
          float w[OCU];
          if constexpr (kOneChannelWeights) {
            w[0] = wt[ky * K + kx];
          } else if constexpr (OCU == OCB) {
            load_weight_row<OCB>(wc + (ky * K + kx) * OCB, w);
          } else {
#pragma unroll
            for (int o = 0; o < OCU; ++o) w[o] = wc[(ky * K + kx) * OCB + o];
          }
#pragma unroll
          for (int o = 0; o < OCU; ++o)
#pragma unroll
            for (int y = 0; y < YB; ++y) acc[o][y] = fmaf(w[o], v[y + ky], acc[o][y]);
        }
        if (kx == 0 && c == 0) CONV_WARP_MARK(5, acc[0][0]);
      }
    }
    CONV_TRACE_STAMP();
    CONV_WARP_MARK(1, acc[0][0]);
    if (pooled) {
      // OW is even (plan rule) and item parity is lane parity: lanes 2j, 2j + 1 hold columns ox, ox + 1
      // of the same rows; the even lane stores.
      const bool left = (ox & 1) == 0;
      const int px = ox >> 1, py0 = oy0 >> 1;
      float* out = smem + O.off + t * O.image + (py0 + O.pad_top) * O.pitch + px + O.pad_left;
#pragma unroll
      for (int o = 0; o < OCU; ++o) {
        const int oc = c0 + o;
#pragma unroll
        for (int y = 0; y < YB / 2; ++y) {
          float a = acc[o][2 * y], b = acc[o][2 * y + 1];
          apply_epilogue2(a, b, epi);
          const float p = pool_2x2(a, b, left, is_max);
          if (valid && left && oc < OC && py0 + y < O.height)
            store(&out[oc * O.channel + y * O.pitch], apply_epilogue(p, pool_epi));
        }
      }
    } else {
      // Lanes past the last item read inputs too; in a cluster, every lane of the warp is done
      // reading before any output leaves (conv_layers' callers rely on it, image_chain.cu).
      if constexpr (!std::is_same_v<Store, LocalStore>) __syncwarp();
      if (!valid) continue;
      float* out = smem + O.off + t * O.image + (oy0 + O.pad_top) * O.pitch + ox + O.pad_left;
#pragma unroll
      for (int o = 0; o < OCU; ++o) {
        const int oc = c0 + o;
        if (oc >= OC) break;
#pragma unroll
        for (int y = 0; y < YB; y += 2) apply_epilogue2(acc[o][y], acc[o][y + 1], epi);
#pragma unroll
        for (int y = 0; y < YB; ++y)
          if (oy0 + y < OH) store(&out[oc * O.channel + y * O.pitch], acc[o][y]);
      }
    }
  }
}

// Any kernel size and stride: one output pixel x OCB channels per thread.
template <int OCB, class Store = LocalStore>
__device__ void conv_generic(const SpatialLayer& L, const float* __restrict__ staged, float* smem, int T,
                             Store store = {}, int part = 0, int parts = 1) {
  const SmemTensor& I = L.in;
  const SmemTensor& O = L.out;
  const int OH = O.height, OW = O.width, OC = O.channels, C = I.channels;
  const int KH = L.kernel_h, KW = L.kernel_w, SH = L.stride_h, SW = L.stride_w, pitch = I.pitch;
  const int groups = L.oc_padded / OCB;
  const int total = T * groups * OH * OW;
  const Divisor by_ow(OW), by_oh(OH), by_groups(groups);
  const float* weights = staged + L.weight_off;
  const float* bias = staged + L.bias_off;
  const unsigned epi = L.epilogue.code;
  const WorkRange<Store> range(total, 1, part, parts);
  for (int item = range.lo + threadIdx.x; item < range.hi; item += blockDim.x) {
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
    static_assert(OCB % 2 == 0, "OCB must be even");
#pragma unroll
    for (int o = 0; o < OCB; o += 2) apply_epilogue2(acc[o], acc[o + 1], epi);
#pragma unroll
    for (int o = 0; o < OCB; ++o) {
      const int oc = g * OCB + o;
      if (oc < OC) store(&out[oc * O.channel], acc[o]);
    }
  }
}

// Pools read their input with bounds checks (logical padding, as the CPU reference: padded positions
// are never visited by maxpool and add zero to an average).
template <class Store = LocalStore>
__device__ void pool_layer(const SpatialLayer& L, float* smem, int T, Store store = {}, int part = 0, int parts = 1) {
  const SmemTensor& I = L.in;
  const SmemTensor& O = L.out;
  const int OH = O.height, OW = O.width, C = O.channels, H = I.height, W = I.width;
  const int KH = L.kernel_h, KW = L.kernel_w;
  const bool is_max = L.op == SpatialOp::MaxPool;
  const unsigned epi = L.epilogue.code;
  const int total = T * C * OH * OW;
  const Divisor by_ow(OW), by_oh(OH), by_c(C);
  const WorkRange<Store> range(total, 1, part, parts);
  for (int item = range.lo + threadIdx.x; item < range.hi; item += blockDim.x) {
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
    store(&smem[O.off + t * O.image + c * O.channel + (oy + O.pad_top) * O.pitch + ox + O.pad_left],
          apply_epilogue(v, epi));
  }
}

__device__ inline void zero_buffer(float* smem, const SmemTensor& b, int T) {
  const int total = T * b.image;
  for (int i = threadIdx.x; i < total; i += blockDim.x) smem[b.off + i] = 0.0f;
}

// The first `images` images of a tile, global [images][C][H][W] at `src` -> the chain's input
// buffer (zeroed first where a conv reads it padded), consecutive threads reading consecutive
// floats. Ends with a barrier.
__device__ inline void load_input_tile(const ConvChainParams& p, const float* __restrict__ src, int images,
                                       float* smem) {
  const int in_elements = p.input_channels * p.input_height * p.input_width;
  const int in_hw = p.input_height * p.input_width;
  const unsigned epi = p.input_epilogue.code;
  if (p.input.zero_fill) {
    zero_buffer(smem, p.input, p.tile_images);
    __syncthreads();
  }
  if (p.input.dense) {
    // Same layout in both places: a straight copy (image stride rounded to 4 floats in shared memory).
    const Divisor by_elements(in_elements);
    for (int i = threadIdx.x; i < images * in_elements; i += blockDim.x) {
      const int t = by_elements.div(i), e = i - t * in_elements;
      smem[p.input.off + t * p.input.image + e] = apply_epilogue(src[i], epi);
    }
  } else {
    const Divisor by_elements(in_elements), by_hw(in_hw), by_w(p.input_width);
    for (int i = threadIdx.x; i < images * in_elements; i += blockDim.x) {
      const int t = by_elements.div(i), e = i - t * in_elements;
      const int c = by_hw.div(e), hw = e - c * in_hw;
      const int row = by_w.div(hw), col = hw - row * p.input_width;
      const float v = apply_epilogue(src[i], epi);
      smem[p.input.off + t * p.input.image + c * p.input.channel + (row + p.input.pad_top) * p.input.pitch + col +
           p.input.pad_left] = v;
    }
  }
  __syncthreads();
}

// The chain's last value of the first `images` images, flattened CHW, to dst[t * dst_pitch + e]
// (global memory, or a dense layer's input row in shared memory) through `epi`.
__device__ inline void store_chain_output(const ConvChainParams& p, const float* smem, int images, float* dst,
                                          int dst_pitch, const Epilogue& epilogue) {
  const SmemTensor& last = p.layer_count > 0 ? p.layers[p.layer_count - 1].out : p.input;
  const int out_hw = last.height * last.width;
  const Divisor by_elements(p.output_elements), by_hw(out_hw), by_w(last.width);
  const unsigned epi = epilogue.code;
  for (int i = threadIdx.x; i < images * p.output_elements; i += blockDim.x) {
    const int t = by_elements.div(i), e = i - t * p.output_elements;
    float v;
    if (last.dense) {
      v = smem[last.off + t * last.image + e];
    } else {
      const int c = by_hw.div(e), hw = e - c * out_hw;
      const int row = by_w.div(hw), col = hw - row * last.width;
      v = smem[last.off + t * last.image + c * last.channel + (row + last.pad_top) * last.pitch + col + last.pad_left];
    }
    dst[t * dst_pitch + e] = apply_epilogue(v, epi);
  }
}

}  // namespace engine::custom::fused

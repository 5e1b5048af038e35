#pragma once
// The tensor-core chain's layers and the two kernel bodies (the family and the layouts:
// tc_chain_params.hpp). T is the operand type (__half or __nv_bfloat16); kFast picks the hardware's
// tanh.approx.f32 (relative error ~2^-11, the size of fp16's own rounding, which every stored
// activation gets anyway) over the accurate tanhf. Host-compilable with -DENGINE_TC_EMULATE
// (tc_warp.cuh), where tests run the same code on emulated warps.
//
//  - c1 (1 -> 8 channels, 5x5 on 32x32): an implicit GEMM, M = 16 output pixels per m-tile, K = 25
//    taps (2 k-tiles, taps 25..31 zero weights), N = 8. One input channel gives no 16-byte rows for
//    ldmatrix: each lane gathers its A fragment's values per m-tile from the input in shared memory
//    (taps at fixed offsets per lane) and packs them.
//  - The m-tiles order pixels by pool window: rows g and g + 8 of a fragment (g = lane / 4) are the
//    window's two rows, lanes g and g ^ 1 its two columns, so the activation and the 2x2 pool take
//    one shuffle and the pooled value leaves the fragment directly.
//  - c3: A by ldmatrix from channels-last [14][14][8], K = 25 taps x 8 = 13 k-tiles, the B fragments
//    in registers for the whole launch.
//  - c3's pooled output (400 values, flattened CHW as the model's dense weights expect) is row i of a
//    [16][408] tile; after 16 images f5, f6, f7 run as GEMMs with M = the 16 images (A and B by
//    ldmatrix from shared memory), each layer's activated output the next one's tile; f7 ends in the
//    softmax on the fragment (a quad of lanes holds an image's 16 logits).
// Versions (llm.c style; the probe has all four): 1 (tc_solo_body) one warp per 16-image tile, one
// m-tile at a time: the simple one; 2 (tc_pair_body, the probe's v4) 8 warps in pairs sharing a
// tile and splitting the dense units, two m-tiles interleaved, fp16 inputs read ahead into registers.
// Each image's values depend only on its own row of every GEMM: the same bits whatever tile, warp or
// batch it lands in.
#include "engine/custom/fused/tc_chain_params.hpp"
#include "engine/custom/fused/tc_warp.cuh"

#include <cmath>

namespace engine::custom::tc {
inline namespace ENGINE_TC_ABI {

template <bool kFast>
__host__ __device__ __forceinline__ float tanh_of(float x) {
#ifdef __CUDA_ARCH__
  if constexpr (kFast) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  } else {
    return tanhf(x);
  }
#else
  return std::tanh(x);
#endif
}

// The activation `kind` (TcAct; uniform across the warp, so the branch does not diverge).
template <bool kFast>
__host__ __device__ __forceinline__ float activate(float x, int kind) {
  switch (kind) {
    case int(TcAct::Relu): return fmaxf(x, 0.0f);
    case int(TcAct::Tanh): return tanh_of<kFast>(x);
    case int(TcAct::Sigmoid):
      if constexpr (kFast) return fmaf(0.5f, tanh_of<true>(0.5f * x), 0.5f);
      else return 1.0f / (1.0f + expf(-x));
    default: return x;
  }
}

// The 2x2 pool of a window whose rows are this lane's (a: row 0, b: row 1) and whose columns are this
// lane (left: column 0) and lane ^ 4: the same order of operations on both lanes.
__host__ __device__ __forceinline__ float pool_window(float a, float b, bool left, int pool_max) {
  if (pool_max) {
    const float mine = fmaxf(a, b);
    return fmaxf(mine, shfl_xor(mine, 4));
  }
  const float mine = a + b;
  const float other = shfl_xor(mine, 4);
  return ((left ? mine : other) + (left ? other : mine)) * 0.25f;
}

// The activation and pool of each layer: fixed at compile time for the signatures the plan
// recognises (the branches in the epilogues fold away), read from the parameters otherwise.
template <int kSig, class Params>
__host__ __device__ __forceinline__ int layer_act(const Params& P, int layer) {
  if constexpr (kSig == kSigTanhAvg) return layer == 4 ? int(TcAct::None) : int(TcAct::Tanh);
  else if constexpr (kSig == kSigReluMax) return layer == 4 ? int(TcAct::None) : int(TcAct::Relu);
  else return P.act[layer];
}
template <int kSig, class Params>
__host__ __device__ __forceinline__ int layer_pool_max(const Params& P, int pool) {
  if constexpr (kSig == kSigTanhAvg) return 0;
  else if constexpr (kSig == kSigReluMax) return 1;
  else return P.pool_max[pool];
}

__host__ __device__ __forceinline__ float to_float(float v) { return v; }
__host__ __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// What a lane keeps in registers for the convolutions: the B fragments of c1 (both k-tiles) and c3
// (13 k-tiles x 2 n-tiles), the biases of its channels, c1's gather offsets, c3's ldmatrix row.
struct ConvRegs {
  unsigned b1f[4];
  unsigned b3f[kC3KTiles][4];
  float c1b0, c1b1, c3b[2][2];
  int tap_off[8];
  bool tap_real[8];
  int c3_row, c3_khalf;
};

// Loads a lane's ConvRegs; the weights pass through two scratch buffers of the warp (c1's 640 B,
// c3's 6.9 KB), free until the first image.
template <class T>
__host__ __device__ __forceinline__ void load_conv_regs(const TcChainParams& P, T* scratch1, T* scratch3, int lane,
                                                        ConvRegs& r) {
  const int t = lane % 4;
  const T* c1 = static_cast<const T*>(P.c1);
  const T* c3 = static_cast<const T*>(P.c3);
  for (int i = lane; i < kC1Out * kC1Pitch / 8; i += 32) copy16(scratch1 + 8 * i, c1 + 8 * i);
  for (int i = lane; i < kC3Out * kC3Pitch / 8; i += 32) copy16(scratch3 + 8 * i, c3 + 8 * i);
  copies_commit();
  copies_wait_all();
  sync_warp();
  ldmatrix_x4(scratch1 + (lane % 8) * kC1Pitch + 8 * (lane / 8), r.b1f[0], r.b1f[1], r.b1f[2], r.b1f[3]);
  const int q = lane / 8, row = lane % 8;
#pragma unroll
  for (int kt = 0; kt < kC3KTiles; ++kt)
    ldmatrix_x4(scratch3 + (8 * (q / 2) + row) * kC3Pitch + 16 * kt + 8 * (q % 2), r.b3f[kt][0], r.b3f[kt][1],
                r.b3f[kt][2], r.b3f[kt][3]);
  sync_warp();
  r.c1b0 = P.c1_bias[2 * t];
  r.c1b1 = P.c1_bias[2 * t + 1];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    r.c3b[j][0] = P.c3_bias[8 * j + 2 * t];
    r.c3b[j][1] = P.c3_bias[8 * j + 2 * t + 1];
  }
  // c1's A fragment: this lane's taps (k columns 2t, 2t+1, 2t+8, 2t+9 of k-tiles 0 and 1) as offsets
  // in the [32][32] input; taps past 24 contribute 0.
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int tap = 16 * (i / 4) + 2 * t + (i % 2) + 8 * ((i / 2) % 2);
    r.tap_real[i] = tap < 25;
    r.tap_off[i] = r.tap_real[i] ? (tap / 5) * kIn + tap % 5 : 0;
  }
  // c3's A rows: this lane addresses row c3_row of each m-tile, k half c3_khalf.
  r.c3_row = 8 * ((lane / 8) % 2) + lane % 8;
  r.c3_khalf = lane / 16;
}

// c1 + activation + 2x2 pool of one image: input [32][32] (fp32 or T) -> c3in [14][14][8].
// kIlp m-tiles at a time, their loads, mma chains and epilogues interleaved; a step past the last
// m-tile repeats it and stores nothing.
template <class T, bool kFast, int kIlp, int kSig, class In>
__host__ __device__ __forceinline__ void conv_c1(const In* in, T* c3in, const ConvRegs& r, const TcChainParams& P,
                                                 int lane) {
  const int g = lane / 4, t = lane % 4;
  const int act = layer_act<kSig>(P, 0), pool_max = layer_pool_max<kSig>(P, 0);
  for (int mt0 = 0; mt0 < 49; mt0 += kIlp) {
    float v[kIlp][2][8];
    int wv[kIlp];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      // Rows g and g + 8: window 4 mt + g / 2, column dx = g % 2, rows dy = 0 and 1.
      const int mt = mt0 + j < 49 ? mt0 + j : 48;
      wv[j] = 4 * mt + g / 2;
      const int py = 2 * (wv[j] / kP1), px = 2 * (wv[j] % kP1) + g % 2;
      const In* p0 = in + py * kIn + px;  // row dy = 0; dy = 1 is kIn further
#pragma unroll
      for (int i2 = 0; i2 < 8; ++i2) {
        v[j][0][i2] = r.tap_real[i2] ? to_float(p0[r.tap_off[i2]]) : 0.0f;
        v[j][1][i2] = r.tap_real[i2] ? to_float(p0[kIn + r.tap_off[i2]]) : 0.0f;
      }
    }
    float acc[kIlp][4] = {};
    // k-tile 0: values 0..3 (k 2t, 2t+1, 2t+8, 2t+9); k-tile 1: values 4..7.
#pragma unroll
    for (int kt = 0; kt < 2; ++kt)
#pragma unroll
      for (int j = 0; j < kIlp; ++j)
        mma_16816<T>(acc[j], Operand<T>::pack(v[j][0][4 * kt], v[j][0][4 * kt + 1]),
                     Operand<T>::pack(v[j][1][4 * kt], v[j][1][4 * kt + 1]),
                     Operand<T>::pack(v[j][0][4 * kt + 2], v[j][0][4 * kt + 3]),
                     Operand<T>::pack(v[j][1][4 * kt + 2], v[j][1][4 * kt + 3]), r.b1f[2 * kt], r.b1f[2 * kt + 1]);
    // acc: [0..1] row g (dy 0), channels 2t, 2t+1; [2..3] row g + 8 (dy 1).
    const bool left = g % 2 == 0;
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const float q0 = pool_window(activate<kFast>(acc[j][0] + r.c1b0, act), activate<kFast>(acc[j][2] + r.c1b0, act),
                                   left, pool_max);
      const float q1 = pool_window(activate<kFast>(acc[j][1] + r.c1b1, act), activate<kFast>(acc[j][3] + r.c1b1, act),
                                   left, pool_max);
      if (left && mt0 + j < 49)
        *reinterpret_cast<unsigned*>(c3in + ((wv[j] / kP1) * kC3In + wv[j] % kP1) * kC3Ch + 2 * t) =
            Operand<T>::pack(q0, q1);
    }
  }
}

// c3 + activation + 2x2 pool of one image: c3in -> one row of a 16-image tile (k = channel * 25 +
// window).
template <class T, bool kFast, int kIlp, int kSig>
__host__ __device__ __forceinline__ void conv_c3(const T* c3in, T* row, const ConvRegs& r, const TcChainParams& P,
                                                 int lane) {
  const int g = lane / 4, t = lane % 4;
  const int act = layer_act<kSig>(P, 1), pool_max = layer_pool_max<kSig>(P, 1);
  for (int mt0 = 0; mt0 < kC3MTiles; mt0 += kIlp) {
    const T* origin[kIlp];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int mt = mt0 + j < kC3MTiles ? mt0 + j : kC3MTiles - 1;
      const int rw = 4 * mt + (r.c3_row % 8) / 2;  // this lane's ldmatrix row: window, column, row
      const int wr = rw < 25 ? rw : 0;
      const int py = 2 * (wr / 5) + r.c3_row / 8, px = 2 * (wr % 5) + r.c3_row % 2;
      origin[j] = c3in + (py * kC3In + px) * kC3Ch;
    }
    float acc[kIlp][2][4] = {};
#pragma unroll
    for (int kt = 0; kt < kC3KTiles; ++kt) {
      const int tap = 2 * kt + r.c3_khalf < 24 ? 2 * kt + r.c3_khalf : 24;  // tap 25 (k 200..207) has zero weights
#pragma unroll
      for (int j = 0; j < kIlp; ++j) {
        unsigned a0, a1, a2, a3;
        ldmatrix_x4(origin[j] + ((tap / 5) * kC3In + tap % 5) * kC3Ch, a0, a1, a2, a3);
        mma_16816<T>(acc[j][0], a0, a1, a2, a3, r.b3f[kt][0], r.b3f[kt][1]);
        mma_16816<T>(acc[j][1], a0, a1, a2, a3, r.b3f[kt][2], r.b3f[kt][3]);
      }
    }
    const bool left = g % 2 == 0;
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int w = 4 * (mt0 + j) + g / 2;  // past the last m-tile: w >= 28, nothing stored
#pragma unroll
      for (int n2 = 0; n2 < 2; ++n2) {
        const float q0 = pool_window(activate<kFast>(acc[j][n2][0] + r.c3b[n2][0], act),
                                     activate<kFast>(acc[j][n2][2] + r.c3b[n2][0], act), left, pool_max);
        const float q1 = pool_window(activate<kFast>(acc[j][n2][1] + r.c3b[n2][1], act),
                                     activate<kFast>(acc[j][n2][3] + r.c3b[n2][1], act), left, pool_max);
        if (left && w < 25) {
          const int ch = 8 * n2 + 2 * t;
          row[ch * 25 + w] = Operand<T>::from_float(q0);
          row[(ch + 1) * 25 + w] = Operand<T>::from_float(q1);
        }
      }
    }
  }
}

// The last layer's epilogue: image g's units 2t, 2t+1 (lo[0..1]) and 8+2t, 9+2t (hi[0..1]), image
// g + 8's in lo[2..3], hi[2..3]; the quad of lanes t = 0..3 holds an image's 16 units. Activation,
// then the softmax over the first `units` (or the values themselves), to y [n][units].
template <bool kFast, bool kBias = true, class Params>
__host__ __device__ __forceinline__ void last_layer_out(const float (&lo)[4], const float (&hi)[4],
                                                        const float* __restrict__ bias, int act, const Params& P,
                                                        float* __restrict__ y, int group_base, int half_rows, int n,
                                                        int lane) {
  const int g = lane / 4, t = lane % 4;
  const int units = P.units;
  const int u[4] = {2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[4] = {lo[2 * h], lo[2 * h + 1], hi[2 * h], hi[2 * h + 1]};  // kBias: + the bias (else included)
    if constexpr (kBias) {
      v[0] += bias[u[0]], v[1] += bias[u[1]], v[2] += bias[u[2]], v[3] += bias[u[3]];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = activate<kFast>(v[i], act);
    float e[4] = {v[0], v[1], v[2], v[3]};
    float s = 1.0f;
    if (P.softmax) {
      float m = -INFINITY;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (u[i] < units) m = fmaxf(m, v[i]);
      m = fmaxf(m, shfl_xor(m, 1));
      m = fmaxf(m, shfl_xor(m, 2));
      s = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        e[i] = u[i] < units ? expf(v[i] - m) : 0.0f;
        s += e[i];
      }
      s += shfl_xor(s, 1);  // the quad's partial sums in a fixed order: the same total on all four
      s += shfl_xor(s, 2);
    }
    // Row g + 8 h is image (g + 8 h) of the tile when its half holds 8 (half_rows); with fewer, the
    // rows past half_rows in each half are unused.
    const int img = group_base + h * half_rows + g;
    if (g < half_rows && img < n) {
      float* dst = y + size_t(img) * size_t(units);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (u[i] < units) dst[u[i]] = P.softmax ? e[i] / s : e[i];
    }
  }
}

// A dense layer on a 16-image tile: out[img][unit] = act(bias + in[img] . w[unit]) into `out` (pitch
// out_pitch), or, for the last layer (NP == 1, 16 units), last_layer_out to y. This warp computes the
// NP pairs of n-tiles from pair np0; `sync` runs between the last read of `in` and the first write
// of `out` (which may alias in's region): the warp's, or the warp pair's barrier.
template <class T, int KT, int NP, bool kLast, bool kFast, class Sync>
__host__ __device__ __forceinline__ void dense_layer(const T* in, int in_pitch, const T* w, int w_pitch,
                                                     const float* __restrict__ bias, int act, T* out, int out_pitch,
                                                     const TcChainParams& P, float* y, int group_base, int half_rows,
                                                     int n, int lane, int np0, Sync sync) {
  float acc[2 * NP][4];
#pragma unroll
  for (int j = 0; j < 2 * NP; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const int a_row = 8 * ((lane / 8) % 2) + lane % 8, a_khalf = lane / 16;
  const int b_row = 8 * (lane / 16) + lane % 8, b_khalf = (lane / 8) % 2;
  const T* wp = w + 16 * np0 * w_pitch;
#pragma unroll 1
  for (int kt = 0; kt < KT; ++kt) {
    unsigned a0, a1, a2, a3;
    ldmatrix_x4(in + a_row * in_pitch + 16 * kt + 8 * a_khalf, a0, a1, a2, a3);
#pragma unroll
    for (int np = 0; np < NP; ++np) {
      unsigned b0, b1, b2, b3;
      ldmatrix_x4(wp + (16 * np + b_row) * w_pitch + 16 * kt + 8 * b_khalf, b0, b1, b2, b3);
      mma_16816<T>(acc[2 * np], a0, a1, a2, a3, b0, b1);
      mma_16816<T>(acc[2 * np + 1], a0, a1, a2, a3, b2, b3);
    }
  }
  sync();
  const int g = lane / 4, t = lane % 4;
  if constexpr (!kLast) {
#pragma unroll
    for (int j = 0; j < 2 * NP; ++j) {
      const int u = 16 * np0 + 8 * j + 2 * t;
      const float b0 = bias[u], b1 = bias[u + 1];
      *reinterpret_cast<unsigned*>(out + g * out_pitch + u) =
          Operand<T>::pack(activate<kFast>(acc[j][0] + b0, act), activate<kFast>(acc[j][1] + b1, act));
      *reinterpret_cast<unsigned*>(out + (g + 8) * out_pitch + u) =
          Operand<T>::pack(activate<kFast>(acc[j][2] + b0, act), activate<kFast>(acc[j][3] + b1, act));
    }
    sync_warp();
  } else {
    static_assert(NP == 1, "the last layer has 16 padded units");
    last_layer_out<kFast>(acc[0], acc[1], bias, act, P, y, group_base, half_rows, n, lane);
  }
}

// The dense weights into the block's shared memory (each thread its share; the caller waits).
template <class T>
__host__ __device__ __forceinline__ void request_dense_weights(const TcChainParams& P, T* smem, int tid, int threads) {
  const T* f5 = static_cast<const T*>(P.f5);
  const T* f6 = static_cast<const T*>(P.f6);
  const T* f7 = static_cast<const T*>(P.f7);
  for (int i = tid; i < kSmemWarp0 / 8; i += threads) {
    const T* src = i < kSmemF6 / 8 ? f5 + 8 * i : i < kSmemF7 / 8 ? f6 + 8 * (i - kSmemF6 / 8) : f7 + 8 * (i - kSmemF7 / 8);
    copy16(smem + 8 * i, src);
  }
  copies_commit();
}

// f5, f6, f7 on a 16-image tile; `np0[l]` and the NP template values split the units between the
// warps that share the tile; `sync` as dense_layer's. f7 (16 units, one warp) runs on `last_warp`.
template <class T, bool kFast, int kSplit, int kSig, class Sync>
__host__ __device__ __forceinline__ void dense_part(const TcChainParams& P, const T* smem, T* tile, float* y, int base,
                                                    int half_rows, int n, int lane, int part, Sync sync) {
  T* f6in = tile;
  T* f7in = tile + 16 * kF6Pitch;
  dense_layer<T, kF5K / 16, kF5N / 16 / kSplit, false, kFast>(tile, kTilePitch, smem + kSmemF5, kTilePitch, P.f5_bias,
                                                               layer_act<kSig>(P, 2), f6in, kF6Pitch, P, y, base, half_rows, n, lane,
                                                               part * (kF5N / 16 / kSplit), sync);
  if constexpr (kSplit > 1) sync();  // f6's input is complete
  dense_layer<T, kF6K / 16, kF6N / 16 / kSplit, false, kFast>(f6in, kF6Pitch, smem + kSmemF6, kF6Pitch, P.f6_bias,
                                                               layer_act<kSig>(P, 3), f7in, kF7Pitch, P, y, base, half_rows, n, lane,
                                                               part * (kF6N / 16 / kSplit), sync);
  if constexpr (kSplit > 1) sync();  // f7's input is complete
  if (part == 0) {
    auto warp_sync = [] { sync_warp(); };
    dense_layer<T, kF7K / 16, kF7N / 16, true, kFast>(f7in, kF7Pitch, smem + kSmemF7, kF7Pitch, P.f7_bias, layer_act<kSig>(P, 4),
                                                      static_cast<T*>(nullptr), 0, P, y, base, half_rows, n, lane, 0,
                                                      warp_sync);
  }
}

// Staging an image's input for c1 (versions 2 and int8): a lane holds float4 k of the image, from
// x [n][32][32] (8 per lane) or x [n][28][28] (196 in all: lanes past them hold none for k = 6),
// and stores it at element staged_at() of the [32][32] buffer, whose zero margin a padded input
// leaves untouched.
__host__ __device__ __forceinline__ bool staged_holds(bool padded, int lane, int k) {
  return !padded || lane + 32 * k < kPaddedVec4;
}
__host__ __device__ __forceinline__ int staged_at(bool padded, int lane, int k) {
  const int i = lane + 32 * k;
  return padded ? (i / (kInPadded / 4) + kInPad) * kIn + (i % (kInPadded / 4)) * 4 + kInPad : 4 * i;
}
__host__ __device__ __forceinline__ void fetch_image(const float* __restrict__ x, int img, bool padded, int lane,
                                                     float4 (&pf)[8]) {
  const float4* src = reinterpret_cast<const float4*>(x + size_t(img) * (padded ? kPaddedVec4 * 4 : kIn * kIn));
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (staged_holds(padded, lane, k)) pf[k] = src[lane + 32 * k];
}

// Version 1: 4 warps per block, each a 16-image tile of its own; the input (fp32) by cp.async.
template <class T, bool kFast, int kSig>
__host__ __device__ __forceinline__ void tc_solo_body(const float* __restrict__ x, const TcChainParams& P,
                                                      float* __restrict__ y, int n, T* smem, int tid, int block,
                                                      int blocks) {
  const int warp = tid / 32, lane = tid % 32;
  request_dense_weights(P, smem, tid, kSoloWarps * 32);
  T* mine = smem + kSmemWarp0 + warp * kWarpElems;
  float* in = reinterpret_cast<float*>(mine + kWarpIn);
  T* c3in = mine + kWarpC3In;
  T* tile = mine + kWarpTile;
  ConvRegs r;
  load_conv_regs(P, c3in, tile, lane, r);
  sync_block();  // every warp's copies of the dense weights have landed (each waited for its own)
  const bool padded = P.padded_input != 0;
  const int image_floats = padded ? kInPadded * kInPadded : kIn * kIn;
  if (padded) {  // the margin stays zero: copies write only the [28][28] inside
    for (int k = lane; k < kIn * kIn; k += 32) in[k] = 0.0f;
    sync_warp();  // before any lane's copy lands inside
  }
  auto request_input = [&](const float* src) {
    if (!padded) {  // one image (4 KB): 8 copies of 16 B per lane
      for (int i = 0; i < 8; ++i) copy16(in + 4 * (lane + 32 * i), src + 4 * (lane + 32 * i));
    } else {  // 28 rows of 14 copies of 8 B (the padded rows start 8 B off a 16-byte boundary)
      for (int i = lane; i < kInPadded * kInPadded / 2; i += 32) {
        const int row = i / (kInPadded / 2), col = 2 * (i % (kInPadded / 2));
        copy_async<8>(in + (row + kInPad) * kIn + kInPad + col, src + row * kInPadded + col);
      }
    }
    copies_commit();
  };
  const int groups = (n + 15) / 16;
  const int stride = blocks * kSoloWarps;
  int group = block * kSoloWarps + warp;
  if (group < groups) request_input(x + size_t(group) * 16 * image_floats);
  for (; group < groups; group += stride) {
    const int base = group * 16;
    for (int i = 0; i < 16; ++i) {
      const int img = base + i;
      T* row = tile + i * kTilePitch;
      if (img >= n) {  // a partial last group: zero rows, results dropped
        for (int k = lane; k < kTilePitch; k += 32) row[k] = Operand<T>::from_float(0.0f);
        continue;
      }
      copies_wait_all();
      sync_warp();
      conv_c1<T, kFast, 1, kSig>(in, c3in, r, P, lane);
      sync_warp();  // c1 has read the input and written c3's
      const int next = i + 1 < 16 ? img + 1 : (group + stride) * 16;
      if (next < n && (i + 1 < 16 || group + stride < groups)) request_input(x + size_t(next) * image_floats);
      conv_c3<T, kFast, 1, kSig>(c3in, row, r, P, lane);
      sync_warp();  // c3 is done with c3in before the next image's c1 writes it
    }
    auto warp_sync = [] { sync_warp(); };
    dense_part<T, kFast, 1, kSig>(P, smem, tile, y, base, 8, n, lane, 0, warp_sync);
    sync_warp();  // the tile is rewritten by the next group
  }
  copies_wait_all();
}

// Version 2: 8 warps per block in 4 pairs (two warps per scheduler: version 1 is latency-bound with
// one). A pair fills one tile of `tile_images` images (even, 2..16: fewer when the batch would leave
// pairs idle, since a warp's images run one after another), each warp half of them in its half of the
// tile's 16 rows, two m-tiles of c1 / c3 at a time; then the pair splits the dense layers' units (f7
// and the softmax on the pair's first warp), meeting at a named barrier. Each warp keeps its input as
// T ([32][32], 2 KB): the next image's is read into registers (8 float4 per lane) while c3 runs, and
// stored converted after it. Shared memory: the dense weights (134 KB) + 4 x (tile 13 KB + 2 x (c3
// input 3.1 KB + input 2 KB)) = 222 KB.
template <class T, bool kFast, int kSig>
__host__ __device__ __forceinline__ void tc_pair_body(const float* __restrict__ x, const TcChainParams& P,
                                                      float* __restrict__ y, int n, int tile_images, T* smem, int tid,
                                                      int block, int blocks) {
  constexpr int kIlp = 2;
  const int warp = tid / 32, lane = tid % 32, pair = warp / 2, half = warp % 2;
  const int H = tile_images / 2;  // this warp's images per tile
  request_dense_weights(P, smem, tid, kPairWarps * 32);
  T* tile = smem + kSmemWarp0 + pair * kPairElems;
  T* c3in = tile + 16 * kTilePitch + half * (kC3In * kC3In * kC3Ch + kIn * kIn);
  T* in = c3in + kC3In * kC3In * kC3Ch;
  ConvRegs r;
  // The pair's warps load their registers one after the other through the tile (c3's weights, 6.9
  // KB) and their own input buffer (c1's); both meet at the same barrier instruction after each turn
  // (compute-sanitizer's synccheck flags a named barrier reached from different places). After the
  // second, the tile is free.
  for (int turn = 0; turn < 2; ++turn) {
    if (turn == half) load_conv_regs(P, in, tile, lane, r);
    pair_sync(pair);
  }
  // Rows a smaller tile never writes hold zeros, not whatever the shared memory held (their results
  // are dropped either way: each row of a GEMM is computed alone).
  for (int k = lane + 32 * half; k < 16 * kTilePitch; k += 64) tile[k] = Operand<T>::from_float(0.0f);
  const bool padded = P.padded_input != 0;
  if (padded)  // the margin stays zero: store_input writes only the [28][28] inside
    for (int k = lane; k < kIn * kIn; k += 32) in[k] = Operand<T>::from_float(0.0f);
  sync_block();
  const int groups = (n + tile_images - 1) / tile_images;
  const int stride = blocks * (kPairWarps / 2);
  // This warp's images: H half .. H half + H - 1 of each of its pair's groups, in order.
  auto image_after = [&](int group, int i) {
    return i + 1 < H ? group * tile_images + H * half + i + 1 : (group + stride) * tile_images + H * half;
  };
  float4 pf[8];
  auto fetch = [&](int img) { fetch_image(x, img, padded, lane, pf); };  // into registers
  auto store_input = [&] {  // the fetched image into `in` as T (a padded row's pairs: 4-byte aligned)
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (!staged_holds(padded, lane, k)) continue;
      unsigned* dst = reinterpret_cast<unsigned*>(in + staged_at(padded, lane, k));
      dst[0] = Operand<T>::pack(pf[k].x, pf[k].y);
      dst[1] = Operand<T>::pack(pf[k].z, pf[k].w);
    }
  };
  int group = block * (kPairWarps / 2) + pair;
  if (group < groups && group * tile_images + H * half < n) {
    fetch(group * tile_images + H * half);
    store_input();
  }
  for (; group < groups; group += stride) {
    const int base = group * tile_images;
    for (int i = 0; i < H; ++i) {
      const int img = base + H * half + i;
      T* row = tile + (8 * half + i) * kTilePitch;
      if (img >= n) {
        for (int k = lane; k < kTilePitch; k += 32) row[k] = Operand<T>::from_float(0.0f);
        continue;
      }
      sync_warp();  // the input stored by every lane
      conv_c1<T, kFast, kIlp, kSig>(in, c3in, r, P, lane);
      sync_warp();
      const int next = image_after(group, i);
      const bool more = next < n && (i + 1 < H || group + stride < groups);
      if (more) fetch(next);
      conv_c3<T, kFast, kIlp, kSig>(c3in, row, r, P, lane);
      sync_warp();  // c1 of the next image may overwrite c3in; c1 of this one is done with `in`
      if (more) store_input();
    }
    pair_sync(pair);  // the tile's rows are written
    auto both = [pair] { pair_sync(pair); };
    dense_part<T, kFast, 2, kSig>(P, smem, tile, y, base, H, n, lane, half, both);
    pair_sync(pair);  // the tile is rewritten by the next group
  }
  copies_wait_all();
}

}  // inline namespace ENGINE_TC_ABI
}  // namespace engine::custom::tc

#pragma once
// The tensor-core chain in int8 (tc_chain_params.hpp: TcInt8Params and the byte layouts): the structure
// of tc_chain.cuh's version 2 (8 warps in pairs sharing a tile, adaptive tiles, two m-tiles at a
// time, the pool-window pixel order) on mma.sync m16n8k32 with int8 operands and exact int32 sums.
// What differs from the 16-bit chain:
//  - every conv and dense input is quantized per tensor as the reference's emulation does it,
//    q = clamp(rne(x / s), -127, 127) (an IEEE division, so that the same x gives the same q), where
//    the 16-bit chain rounds to the format; the sum is dequantized by one multiply (s_in * s_o per
//    output channel, computed at plan time), then bias, activation and pooling in fp32;
//  - c1's K is one k-tile of 32 (25 taps), the input stored quantized ([32][32] bytes);
//  - c3's k-tile holds 4 taps x 8 channels: ldmatrix's 16-byte rows are two taps side by side in x,
//    so the taps are numbered ky * 6 + kx (kx = 5 and ky = 5 have zero weights) and the input is
//    [15][16][8] (the zero-weight taps read inside it), twice: rows must start 16-byte aligned, a
//    pixel is 8 bytes, so lanes whose pixel column is odd read the copy stored 8 bytes further;
//  - f5 / f6 / f7's k-tiles are 32 wide; the pitches are odd multiples of 16 bytes (ldmatrix rows on
//    distinct banks).
#include <cstdint>

#include "engine/custom/fused/tc_chain.cuh"

namespace engine::custom::tc {
inline namespace ENGINE_TC_ABI {

// q = clamp(rne(x * (1 / s)), -127, 127): engine::reference::fake_quantize's x / s as a multiply (an
// IEEE division per value cost the first version 3x its speed; the two differ only within ~1 ulp of a
// rounding boundary); inv = 0 (a zero range) gives 0, as the reference's.
__host__ __device__ __forceinline__ int quantize(float x, float inv) {
#ifdef __CUDA_ARCH__
  const float q = rintf(x * inv);
#else
  const float q = std::nearbyint(x * inv);
#endif
  return int(fmaxf(-127.0f, fminf(127.0f, q)));
}

// The dequantized sum plus the bias in one rounding (an explicit fma: where the compiler contracts a
// multiply and an add is its choice, and it may choose differently for two rows of a fragment, which
// would make an image's bits depend on the row it lands in).
__host__ __device__ __forceinline__ float dequantize(int acc, float scale, float bias) {
  return fmaf(float(acc), scale, bias);
}

__host__ __device__ __forceinline__ unsigned pack4(int q0, int q1, int q2, int q3) {
  return (unsigned(q0) & 0xffu) | ((unsigned(q1) & 0xffu) << 8) | ((unsigned(q2) & 0xffu) << 16) |
         ((unsigned(q3) & 0xffu) << 24);
}
__host__ __device__ __forceinline__ unsigned short pack2(int q0, int q1) {
  return static_cast<unsigned short>((unsigned(q0) & 0xffu) | ((unsigned(q1) & 0xffu) << 8));
}

// What a lane keeps in registers for the convolutions: the B fragments of c1 (one k-tile) and c3 (8
// k-tiles x 2 n-tiles), the scales and biases of its channels, c1's gather offsets, c3's ldmatrix row.
struct QConvRegs {
  unsigned b1f[2];
  unsigned b3f[kQC3KTiles][4];
  float c1s[2], c1b[2], c3s[2][2], c3b[2][2];
  int tap_off[8];
  bool tap_real[8];
  int c3_row, c3_khalf;
};

// Loads a lane's QConvRegs through two scratch buffers of the warp (c1's 384 B, c3's 4.3 KB).
__host__ __device__ __forceinline__ void load_qconv_regs(const TcInt8Params& P, int8_t* scratch1, int8_t* scratch3,
                                                         int lane, QConvRegs& r) {
  const int t = lane % 4;
  const int8_t* c1 = static_cast<const int8_t*>(P.c1);
  const int8_t* c3 = static_cast<const int8_t*>(P.c3);
  for (int i = lane; i < kC1Out * kQC1Pitch / 16; i += 32) copy16(scratch1 + 16 * i, c1 + 16 * i);
  for (int i = lane; i < kC3Out * kQC3Pitch / 16; i += 32) copy16(scratch3 + 16 * i, c3 + 16 * i);
  copies_commit();
  copies_wait_all();
  sync_warp();
  // c1's B (32 taps x 8 channels): matrix 0 = taps 0..15 of channels 0..7, matrix 1 = taps 16..31;
  // matrices 2 and 3 repeat them (unused).
  unsigned unused0, unused1;
  ldmatrix_x4(scratch1 + (lane % 8) * kQC1Pitch + 16 * ((lane / 8) % 2), r.b1f[0], r.b1f[1], unused0, unused1);
  // c3's B per k-tile: (channels 0..7, k 0..15), (0..7, 16..31), (8..15, 0..15), (8..15, 16..31).
  const int q = lane / 8, row = lane % 8;
#pragma unroll
  for (int kt = 0; kt < kQC3KTiles; ++kt)
    ldmatrix_x4(scratch3 + (8 * (q / 2) + row) * kQC3Pitch + 32 * kt + 16 * (q % 2), r.b3f[kt][0], r.b3f[kt][1],
                r.b3f[kt][2], r.b3f[kt][3]);
  sync_warp();
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    r.c1s[e] = P.c1_scale[2 * t + e];
    r.c1b[e] = P.c1_bias[2 * t + e];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      r.c3s[j][e] = P.c3_scale[8 * j + 2 * t + e];
      r.c3b[j][e] = P.c3_bias[8 * j + 2 * t + e];
    }
  }
  // c1's A fragment: this lane's taps 4t..4t+3 (a0, a1) and 16+4t..16+4t+3 (a2, a3) as offsets in the
  // [32][32] input; taps past 24 contribute 0.
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int tap = 16 * (i / 4) + 4 * t + i % 4;
    r.tap_real[i] = tap < 25;
    r.tap_off[i] = r.tap_real[i] ? (tap / 5) * kIn + tap % 5 : 0;
  }
  r.c3_row = 8 * ((lane / 8) % 2) + lane % 8;
  r.c3_khalf = lane / 16;
}

// c1 + activation + 2x2 pool of one image: the quantized input [32][32] -> c3's input [15][16][8] in
// both copies (c3a, and c3b 8 bytes off alignment), quantized with c3's input scale.
template <bool kFast, int kIlp, int kSig>
__host__ __device__ __forceinline__ void qconv_c1(const int8_t* in, int8_t* c3a, int8_t* c3b, const QConvRegs& r,
                                                  const TcInt8Params& P, int lane) {
  const int g = lane / 4, t = lane % 4;
  const int act = layer_act<kSig>(P, 0), pool_max = layer_pool_max<kSig>(P, 0);
  const float s_out = P.in_inv[1];
  for (int mt0 = 0; mt0 < 49; mt0 += kIlp) {
    unsigned a[kIlp][4];
    int wv[kIlp];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int mt = mt0 + j < 49 ? mt0 + j : 48;
      wv[j] = 4 * mt + g / 2;
      const int py = 2 * (wv[j] / kP1), px = 2 * (wv[j] % kP1) + g % 2;
      const int8_t* p0 = in + py * kIn + px;
      int v[2][8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        v[0][i] = r.tap_real[i] ? int(p0[r.tap_off[i]]) : 0;
        v[1][i] = r.tap_real[i] ? int(p0[kIn + r.tap_off[i]]) : 0;
      }
      a[j][0] = pack4(v[0][0], v[0][1], v[0][2], v[0][3]);
      a[j][1] = pack4(v[1][0], v[1][1], v[1][2], v[1][3]);
      a[j][2] = pack4(v[0][4], v[0][5], v[0][6], v[0][7]);
      a[j][3] = pack4(v[1][4], v[1][5], v[1][6], v[1][7]);
    }
    int acc[kIlp][4] = {};
#pragma unroll
    for (int j = 0; j < kIlp; ++j) mma_16832_s8(acc[j], a[j][0], a[j][1], a[j][2], a[j][3], r.b1f[0], r.b1f[1]);
    const bool left = g % 2 == 0;
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      float o[2];
#pragma unroll
      for (int e = 0; e < 2; ++e)
        o[e] = pool_window(activate<kFast>(dequantize(acc[j][e], r.c1s[e], r.c1b[e]), act),
                           activate<kFast>(dequantize(acc[j][2 + e], r.c1s[e], r.c1b[e]), act), left, pool_max);
      if (left && mt0 + j < 49) {
        const int at = ((wv[j] / kP1) * kQC3InCols + wv[j] % kP1) * kC3Ch + 2 * t;
        const unsigned short q = pack2(quantize(o[0], s_out), quantize(o[1], s_out));
        *reinterpret_cast<unsigned short*>(c3a + at) = q;
        *reinterpret_cast<unsigned short*>(c3b + at) = q;
      }
    }
  }
}

// c3 + activation + 2x2 pool of one image: c3in -> one row of a 16-image tile (k = channel * 25 +
// window), quantized with f5's input scale.
template <bool kFast, int kIlp, int kSig>
__host__ __device__ __forceinline__ void qconv_c3(const int8_t* c3a, const int8_t* c3b, int8_t* row,
                                                  const QConvRegs& r, const TcInt8Params& P, int lane) {
  const int g = lane / 4, t = lane % 4;
  const int act = layer_act<kSig>(P, 1), pool_max = layer_pool_max<kSig>(P, 1);
  const float s_out = P.in_inv[2];
  for (int mt0 = 0; mt0 < kC3MTiles; mt0 += kIlp) {
    const int8_t* origin[kIlp];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int mt = mt0 + j < kC3MTiles ? mt0 + j : kC3MTiles - 1;
      const int rw = 4 * mt + (r.c3_row % 8) / 2;  // this lane's ldmatrix row: window, column, row
      const int wr = rw < 25 ? rw : 0;
      const int py = 2 * (wr / 5) + r.c3_row / 8, px = 2 * (wr % 5) + r.c3_row % 2;
      origin[j] = (px % 2 ? c3b : c3a) + (py * kQC3InCols + px) * kC3Ch;  // kx is even: px's parity holds
    }
    int acc[kIlp][2][4] = {};
#pragma unroll
    for (int kt = 0; kt < kQC3KTiles; ++kt) {
      const int tap = 4 * kt + 2 * r.c3_khalf;  // this half's taps: tap and tap + 1, side by side in x
      const int ky = tap / kQC3TapCols, kx = tap % kQC3TapCols;
#pragma unroll
      for (int j = 0; j < kIlp; ++j) {
        unsigned a0, a1, a2, a3;
        ldmatrix_x4(origin[j] + (ky * kQC3InCols + kx) * kC3Ch, a0, a1, a2, a3);
        mma_16832_s8(acc[j][0], a0, a1, a2, a3, r.b3f[kt][0], r.b3f[kt][1]);
        mma_16832_s8(acc[j][1], a0, a1, a2, a3, r.b3f[kt][2], r.b3f[kt][3]);
      }
    }
    const bool left = g % 2 == 0;
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int w = 4 * (mt0 + j) + g / 2;  // past the last m-tile: w >= 28, nothing stored
#pragma unroll
      for (int n2 = 0; n2 < 2; ++n2) {
        float o[2];
#pragma unroll
        for (int e = 0; e < 2; ++e)
          o[e] = pool_window(activate<kFast>(dequantize(acc[j][n2][e], r.c3s[n2][e], r.c3b[n2][e]), act),
                             activate<kFast>(dequantize(acc[j][n2][2 + e], r.c3s[n2][e], r.c3b[n2][e]), act), left,
                             pool_max);
        if (left && w < 25) {
          const int ch = 8 * n2 + 2 * t;
          row[ch * 25 + w] = int8_t(quantize(o[0], s_out));
          row[(ch + 1) * 25 + w] = int8_t(quantize(o[1], s_out));
        }
      }
    }
  }
}

// A dense layer on a 16-image int8 tile: out[img][unit] = q(act(scale[u] * (in[img] . w[unit]) +
// bias[u]), s_next) (s_next: the next layer's 1 / s), or, for the last layer (NP == 1),
// last_layer_out. As tc_chain.cuh's dense_layer.
template <int KT, int NP, bool kLast, bool kFast, class Sync>
__host__ __device__ __forceinline__ void qdense_layer(const int8_t* in, int in_pitch, const int8_t* w, int w_pitch,
                                                      const float* __restrict__ scale, const float* __restrict__ bias,
                                                      int act, float s_next, int8_t* out, int out_pitch,
                                                      const TcInt8Params& P, float* y, int group_base, int half_rows,
                                                      int n, int lane, int np0, Sync sync) {
  int acc[2 * NP][4];
#pragma unroll
  for (int j = 0; j < 2 * NP; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
  const int a_row = 8 * ((lane / 8) % 2) + lane % 8, a_khalf = lane / 16;
  const int b_row = 8 * (lane / 16) + lane % 8, b_khalf = (lane / 8) % 2;
  const int8_t* wp = w + 16 * np0 * w_pitch;
#pragma unroll 1
  for (int kt = 0; kt < KT; ++kt) {
    unsigned a0, a1, a2, a3;
    ldmatrix_x4(in + a_row * in_pitch + 32 * kt + 16 * a_khalf, a0, a1, a2, a3);
#pragma unroll
    for (int np = 0; np < NP; ++np) {
      unsigned b0, b1, b2, b3;
      ldmatrix_x4(wp + (16 * np + b_row) * w_pitch + 32 * kt + 16 * b_khalf, b0, b1, b2, b3);
      mma_16832_s8(acc[2 * np], a0, a1, a2, a3, b0, b1);
      mma_16832_s8(acc[2 * np + 1], a0, a1, a2, a3, b2, b3);
    }
  }
  sync();
  const int g = lane / 4, t = lane % 4;
  if constexpr (!kLast) {
#pragma unroll
    for (int j = 0; j < 2 * NP; ++j) {
      const int u = 16 * np0 + 8 * j + 2 * t;
      const float s0 = scale[u], s1 = scale[u + 1], b0 = bias[u], b1 = bias[u + 1];
      *reinterpret_cast<unsigned short*>(out + g * out_pitch + u) =
          pack2(quantize(activate<kFast>(dequantize(acc[j][0], s0, b0), act), s_next),
                quantize(activate<kFast>(dequantize(acc[j][1], s1, b1), act), s_next));
      *reinterpret_cast<unsigned short*>(out + (g + 8) * out_pitch + u) =
          pack2(quantize(activate<kFast>(dequantize(acc[j][2], s0, b0), act), s_next),
                quantize(activate<kFast>(dequantize(acc[j][3], s1, b1), act), s_next));
    }
    sync_warp();
  } else {
    static_assert(NP == 1, "the last layer has 16 padded units");
    float lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int u = 2 * t + i % 2;
      lo[i] = dequantize(acc[0][i], scale[u], bias[u]);
      hi[i] = dequantize(acc[1][i], scale[8 + u], bias[8 + u]);
    }
    last_layer_out<kFast, false>(lo, hi, nullptr, act, P, y, group_base, half_rows, n, lane);
  }
}

// The dense weights into the block's shared memory (each thread its share; the caller waits).
__host__ __device__ __forceinline__ void request_qdense_weights(const TcInt8Params& P, int8_t* smem, int tid,
                                                                int threads) {
  const int8_t* f5 = static_cast<const int8_t*>(P.f5);
  const int8_t* f6 = static_cast<const int8_t*>(P.f6);
  const int8_t* f7 = static_cast<const int8_t*>(P.f7);
  for (int i = tid; i < kQSmemWarp0 / 16; i += threads) {
    const int8_t* src = i < kQSmemF6 / 16   ? f5 + 16 * i
                        : i < kQSmemF7 / 16 ? f6 + 16 * (i - kQSmemF6 / 16)
                                            : f7 + 16 * (i - kQSmemF7 / 16);
    copy16(smem + 16 * i, src);
  }
  copies_commit();
}

// The int8 chain, version 2's structure (tc_pair_body): kQPairs pairs of warps per block, tiles of
// tile_images images.
template <bool kFast, int kSig>
__host__ __device__ __forceinline__ void tc_int8_body(const float* __restrict__ x, const TcInt8Params& P,
                                                      float* __restrict__ y, int n, int tile_images, int8_t* smem,
                                                      int tid, int block, int blocks) {
  constexpr int kIlp = 2;
  const int warp = tid / 32, lane = tid % 32, pair = warp / 2, half = warp % 2;
  const int H = tile_images / 2;
  request_qdense_weights(P, smem, tid, 2 * kQPairs * 32);
  int8_t* tile = smem + kQSmemWarp0 + pair * kQPairBytes;
  int8_t* c3a = tile + 16 * kQF5Pitch + half * (kQC3InBuf + kIn * kIn);
  int8_t* c3b = c3a + kQC3InBytes + 8;
  int8_t* in = c3a + kQC3InBuf;
  QConvRegs r;
  for (int turn = 0; turn < 2; ++turn) {  // through the shared tile one warp at a time (as tc_pair_body)
    if (turn == half) load_qconv_regs(P, in, tile, lane, r);
    pair_sync(pair);
  }
  // Zeros where nothing is written but ldmatrix reads: the tile's unused rows and c3in's margin (the
  // zero-weight taps' row 14 and column 14, 15).
  for (int k = lane + 32 * half; k < 16 * kQF5Pitch; k += 64) tile[k] = 0;
  for (int k = lane; k < kQC3InBuf; k += 32) c3a[k] = 0;
  const bool padded = P.padded_input != 0;
  if (padded)  // the margin stays zero (q = 0): store_input writes only the [28][28] inside
    for (int k = lane; k < kIn * kIn; k += 32) in[k] = 0;
  sync_block();
  const int groups = (n + tile_images - 1) / tile_images;
  const int stride = blocks * kQPairs;
  auto image_after = [&](int group, int i) {
    return i + 1 < H ? group * tile_images + H * half + i + 1 : (group + stride) * tile_images + H * half;
  };
  const float s_in = P.in_inv[0];
  float4 pf[8];
  auto fetch = [&](int img) { fetch_image(x, img, padded, lane, pf); };
  auto store_input = [&] {  // the fetched image into `in`, quantized with c1's input scale
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (!staged_holds(padded, lane, k)) continue;
      int8_t* dst = in + staged_at(padded, lane, k);
      const int q0 = quantize(pf[k].x, s_in), q1 = quantize(pf[k].y, s_in);
      const int q2 = quantize(pf[k].z, s_in), q3 = quantize(pf[k].w, s_in);
      if (!padded) {
        *reinterpret_cast<unsigned*>(dst) = pack4(q0, q1, q2, q3);
      } else {  // a padded row's quads start 2 bytes off a 4-byte boundary
        reinterpret_cast<unsigned short*>(dst)[0] = pack2(q0, q1);
        reinterpret_cast<unsigned short*>(dst)[1] = pack2(q2, q3);
      }
    }
  };
  int group = block * kQPairs + pair;
  if (group < groups && group * tile_images + H * half < n) {
    fetch(group * tile_images + H * half);
    store_input();
  }
  for (; group < groups; group += stride) {
    const int base = group * tile_images;
    for (int i = 0; i < H; ++i) {
      const int img = base + H * half + i;
      int8_t* row = tile + (8 * half + i) * kQF5Pitch;
      if (img >= n) {
        for (int k = lane; k < kQF5Pitch; k += 32) row[k] = 0;
        continue;
      }
      sync_warp();
      qconv_c1<kFast, kIlp, kSig>(in, c3a, c3b, r, P, lane);
      sync_warp();
      const int next = image_after(group, i);
      const bool more = next < n && (i + 1 < H || group + stride < groups);
      if (more) fetch(next);
      qconv_c3<kFast, kIlp, kSig>(c3a, c3b, row, r, P, lane);
      sync_warp();
      if (more) store_input();
    }
    pair_sync(pair);
    auto both = [pair] { pair_sync(pair); };
    int8_t* f6in = tile;
    int8_t* f7in = tile + 16 * kQF6Pitch;
    qdense_layer<kQF5KTiles, kF5N / 32, false, kFast>(tile, kQF5Pitch, smem + kQSmemF5, kQF5Pitch, P.f5_scale,
                                                       P.f5_bias, layer_act<kSig>(P, 2), P.in_inv[3], f6in,
                                                       kQF6Pitch, P, y, base, H, n, lane, half * (kF5N / 32), both);
    pair_sync(pair);
    qdense_layer<kQF6KTiles, kF6N / 32, false, kFast>(f6in, kQF6Pitch, smem + kQSmemF6, kQF6Pitch, P.f6_scale,
                                                       P.f6_bias, layer_act<kSig>(P, 3), P.in_inv[4], f7in,
                                                       kQF7Pitch, P, y, base, H, n, lane, half * (kF6N / 32), both);
    pair_sync(pair);
    if (half == 0) {
      auto warp_sync = [] { sync_warp(); };
      qdense_layer<kQF7KTiles, 1, true, kFast>(f7in, kQF7Pitch, smem + kQSmemF7, kQF7Pitch, P.f7_scale, P.f7_bias,
                                               layer_act<kSig>(P, 4), 0.0f, static_cast<int8_t*>(nullptr), 0, P, y,
                                               base, H, n, lane, 0, warp_sync);
    }
    pair_sync(pair);
  }
  copies_wait_all();
}

}  // inline namespace ENGINE_TC_ABI
}  // namespace engine::custom::tc

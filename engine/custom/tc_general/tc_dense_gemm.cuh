#pragma once
// The bodies of tc_dense_forward's and tc_pool_forward's kernels (tc_dense_gemm.hpp says what they
// compute). Host-callable for the emulated test (tests/gpu/custom_tc_general_emulated_test.cpp): the
// warp operations come from fused/tc_warp.cuh, where each lane is a host thread and ldmatrix / mma.sync follow the PTX ISA's
// fragment layouts.
//
// Fragments (m16n8k16, g = lane / 4, t = lane % 4): A a0 = rows g, k 2t..2t+1; a1 rows g + 8; a2 and a3
// the same rows at k + 8. B b0 = k 2t..2t+1 of column g; b1 at k + 8. ldmatrix.x4 gives matrix q to
// the registers' q-th, lane L addressing row L % 8 of matrix L / 8; so for A lane L addresses row
// L % 16 at k (L / 16) * 8 (matrices: rows 0-7 / 8-15 at k 0-7, then at k 8-15), and for B (rows of
// w are output channels, k contiguous: the "col" operand) lane L addresses channel
// (L % 8) + (L / 16) * 8 at k ((L / 8) % 2) * 8 (b0, b1 of one n-tile, then of the next).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "engine/custom/fused/tc_warp.cuh"
#include "engine/custom/tc_gemm.cuh"
#include "engine/custom/tc_general/tc_dense_gemm.hpp"

namespace engine::custom::tc {
inline namespace ENGINE_TC_ABI {

// Waits until at most kPending committed groups of copies are still in flight.
template <int kPending>
__host__ __device__ __forceinline__ void copies_wait_prior() {
#ifdef __CUDA_ARCH__
  __pipeline_wait_prior(kPending);
#endif
}

template <class T>
__host__ __device__ __forceinline__ float round_to(float v) {
  return Operand<T>::to_float(Operand<T>::from_float(v));
}

template <class T>
__host__ __device__ __forceinline__ float bits_to_float(unsigned bits) {
  const uint16_t b = uint16_t(bits);
  T v;
  memcpy(&v, &b, 2);
  return Operand<T>::to_float(v);
}

// One block's tile: linear block index `block` over (row blocks) x (column blocks), column blocks
// fastest, so the blocks reading the same rows of x run together and share them through L2.
// kRead (a TcgRead): how x is read, compiled per kind so a dense layer's kernel carries none of a
// convolution's registers; it must be tcg_read_of(a).
template <class T, int kBm, int kBn, int kWm, int kWn, int kRead>
__host__ __device__ __forceinline__ void tc_dense_block(const tcg::TcDenseArgs& a, int m_rows, long long block,
                                                        int tid, unsigned char* smem) {
  using tcg::kTcgBk;
  using tcg::kTcgPitch;
  using tcg::kTcgStages;
  constexpr int kWarpsN = kBn / kWn;
  constexpr int kThreads = 32 * (kBm / kWm) * kWarpsN;
  constexpr int kMt = kWm / 16, kNt = kWn / 8;
  static_assert(kNt % 2 == 0, "B fragments are loaded two n-tiles at a time");
  constexpr int kAChunks = kBm * (kTcgBk / 8);  // 16-byte pieces of a stage's x tile
  constexpr int kBChunks = kBn * (kTcgBk / 8);
  constexpr int kAPer = kAChunks / kThreads;     // pieces of the x tile each thread loads per stage
  static_assert(kAChunks % kThreads == 0, "every thread loads the same number of pieces");
  static_assert(kThreads % 4 == 0, "a thread's pieces of x sit at one k");

  const int col_blocks = (a.cols + kBn - 1) / kBn;
  const long long block_m = block / col_blocks;
  const int block_n = int(block - block_m * col_blocks);
  const long long row0 = block_m * kBm;
  const int col0 = block_n * kBn;

  uint16_t* As = reinterpret_cast<uint16_t*>(smem);         // [stage][kBm][kTcgPitch]
  uint16_t* Bs = As + kTcgStages * kBm * kTcgPitch;          // [stage][kBn][kTcgPitch]
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  const int k_steps = a.k_padded / kTcgBk;

  auto load_b = [&](int kt, int buf) {
    for (int c = tid; c < kBChunks; c += kThreads) {
      const int r = c / 4, p = c % 4;
      copy16(Bs + (buf * kBn + r) * kTcgPitch + p * 8,
             w + size_t(col0 + r) * size_t(a.k_padded) + size_t(kt) * kTcgBk + p * 8);
    }
  };
  // A convolution's rows: the thread's rows are the same at every stage, so where their windows sit
  // in the input is worked out once. base < 0: a row past m_rows.
  const tcg::TcConvGeometry& cv = a.conv;
  constexpr bool conv = kRead != int(tcg::TcgRead::Rows);
  const bool x_f32 = conv ? kRead == int(tcg::TcgRead::Image32) : a.x_f32;
  long long base[kAPer];
  int iy0[kAPer], ix0[kAPer];
#pragma unroll
  for (int j = 0; j < kAPer; ++j) {
    const long long m = row0 + (tid + j * kThreads) / 4;
    base[j] = m < m_rows ? 0 : -1;
    iy0[j] = ix0[j] = 0;
    if constexpr (conv) {
      if (m >= m_rows) continue;
      const int ohw = cv.oh * cv.ow;
      const long long img = m / ohw;
      const int pix = int(m - img * ohw), oy = pix / cv.ow, ox = pix - oy * cv.ow;
      base[j] = img * (long long)cv.h * cv.w * cv.pitch;
      iy0[j] = oy * cv.sh - cv.pt;
      ix0[j] = ox * cv.sw - cv.pl;
    }
  }
  // 16-bit x: rows past m_rows, pieces past k and a convolution's taps outside the image are zeros
  // (stored, not copied). A piece of 8 channels never straddles two taps (pitch is a multiple of 8).
  auto load_a16 = [&](int kt, int buf) {
    const uint16_t* x = static_cast<const uint16_t*>(a.x);
    // Every piece of this thread is at the same k (kThreads is a multiple of 4): its tap once per stage.
    const int k = kt * kTcgBk + (tid % 4) * 8;
    int ch = k, ky = 0, kx = 0;
    if constexpr (conv) {
      const int tap = k / cv.pitch;
      ch = k - tap * cv.pitch, ky = tap / cv.kw, kx = tap - ky * cv.kw;
    }
#pragma unroll
    for (int j = 0; j < kAPer; ++j) {
      const int r = (tid + j * kThreads) / 4;
      uint16_t* dst = As + (buf * kBm + r) * kTcgPitch + (tid % 4) * 8;
      const uint16_t* src = nullptr;
      if (base[j] >= 0 && k < a.k) {
        if constexpr (!conv) {
          src = x + size_t(row0 + r) * size_t(a.ldx) + size_t(k);
        } else {
          const int iy = iy0[j] + ky, ix = ix0[j] + kx;
          if (iy >= 0 && iy < cv.h && ix >= 0 && ix < cv.w)
            src = x + size_t(base[j]) + (size_t(iy) * size_t(cv.w) + size_t(ix)) * size_t(cv.pitch) + size_t(ch);
        }
      }
      if (src) copy16(dst, src);
      else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  };
  // fp32 x: loaded into registers one stage ahead, rounded and stored after the current stage's mma.
  // A convolution's first layer gathers value by value (its K is small: channels x taps).
  float xv[kAPer][8];
  const bool vec = !conv && a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  auto load_a32 = [&](int kt) {
    const float* x = static_cast<const float*>(a.x);
    const int k = kt * kTcgBk + (tid % 4) * 8;  // the same for every piece of this thread
    // A convolution: the 8 values' channel offsets and taps, once per stage (values past K get a
    // row far outside the image).
    int off[8], eky[8], ekx[8];
    if constexpr (conv) {
      const int khw = cv.kh * cv.kw;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int kk = k + i, ch = kk / khw, tap = kk - ch * khw;
        eky[i] = kk < a.k ? tap / cv.kw : -(1 << 29);  // every row out of the image
        ekx[i] = tap - (tap / cv.kw) * cv.kw;
        off[i] = ch * cv.h * cv.w;
      }
    }
#pragma unroll
    for (int j = 0; j < kAPer; ++j) {
      const long long m = row0 + (tid + j * kThreads) / 4;
      if constexpr (conv) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int iy = iy0[j] + eky[i], ix = ix0[j] + ekx[i];
          xv[j][i] = base[j] >= 0 && iy >= 0 && iy < cv.h && ix >= 0 && ix < cv.w
                         ? x[size_t(base[j]) + size_t(off[i]) + size_t(iy) * size_t(cv.w) + size_t(ix)]
                         : 0.0f;
        }
        continue;
      }
      const float* src = x + size_t(m) * size_t(a.ldx) + size_t(k);
      if (m < m_rows && vec && k + 8 <= a.k) {
        const float4 lo = reinterpret_cast<const float4*>(src)[0], hi = reinterpret_cast<const float4*>(src)[1];
        xv[j][0] = lo.x, xv[j][1] = lo.y, xv[j][2] = lo.z, xv[j][3] = lo.w;
        xv[j][4] = hi.x, xv[j][5] = hi.y, xv[j][6] = hi.z, xv[j][7] = hi.w;
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) xv[j][i] = m < m_rows && k + i < a.k ? src[i] : 0.0f;
      }
    }
  };
  auto store_a32 = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kAPer; ++j) {
      const int c = tid + j * kThreads, r = c / 4, p = c % 4;
      *reinterpret_cast<uint4*>(As + (buf * kBm + r) * kTcgPitch + p * 8) =
          make_uint4(Operand<T>::pack(xv[j][0], xv[j][1]), Operand<T>::pack(xv[j][2], xv[j][3]),
                     Operand<T>::pack(xv[j][4], xv[j][5]), Operand<T>::pack(xv[j][6], xv[j][7]));
    }
  };

  const int warp = tid / 32, lane = tid % 32;
  const int wm0 = (warp / kWarpsN) * kWm, wn0 = (warp % kWarpsN) * kWn;
  float acc[kMt][kNt][4];
#pragma unroll
  for (int i = 0; i < kMt; ++i)
#pragma unroll
    for (int j = 0; j < kNt; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  auto compute = [&](int buf) {
    const uint16_t* Ab = As + buf * kBm * kTcgPitch;
    const uint16_t* Bb = Bs + buf * kBn * kTcgPitch;
#pragma unroll
    for (int ks = 0; ks < kTcgBk; ks += 16) {
      unsigned af[kMt][4], bf[kNt][2];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
        ldmatrix_x4(Ab + (wm0 + mt * 16 + lane % 16) * kTcgPitch + ks + (lane / 16) * 8, af[mt][0], af[mt][1],
                    af[mt][2], af[mt][3]);
#pragma unroll
      for (int np = 0; np < kNt / 2; ++np)
        ldmatrix_x4(Bb + (wn0 + np * 16 + lane % 8 + (lane / 16) * 8) * kTcgPitch + ks + ((lane / 8) % 2) * 8,
                    bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1]);
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
          mma_16816<T>(acc[mt][nt], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[nt][0], bf[nt][1]);
    }
  };

  // Stage kt lives in buffer kt % kTcgStages; one group of copies is committed per stage (empty past
  // the end), so waiting for all but the newest kTcgStages - 2 groups completes stage kt.
#pragma unroll
  for (int s = 0; s < kTcgStages - 1; ++s) {
    if (s < k_steps) {
      load_b(s, s);
      if (x_f32) {
        load_a32(s);
        store_a32(s);
      } else {
        load_a16(s, s);
      }
    }
    copies_commit();
  }
  for (int kt = 0; kt < k_steps; ++kt) {
    copies_wait_prior<kTcgStages - 2>();
    sync_block();  // stage kt is in place for every thread, and buffer (kt - 1) % stages is free
    const int next = kt + kTcgStages - 1, next_buf = next % kTcgStages;
    if (next < k_steps) {
      load_b(next, next_buf);
      if (x_f32) load_a32(next);
      else load_a16(next, next_buf);
    }
    copies_commit();
    compute(kt % kTcgStages);
    if (x_f32 && next < k_steps) store_a32(next_buf);
  }

  // Epilogue: accumulator i of (mt, nt) is row g + 8 (i / 2), column 2t + i % 2 of the fragment.
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int col = col0 + wn0 + nt * 8 + 2 * t;
      if (col >= a.cols) continue;
      const float b0 = a.bias[col], b1 = a.bias[col + 1];  // bias rows padded past cols
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long row = row0 + wm0 + mt * 16 + g + 8 * h;
        if (row >= m_rows) continue;
        float v0 = round_to<T>(tc_gemm_act(round_to<T>(acc[mt][nt][2 * h] + b0), a.act));
        float v1 = round_to<T>(tc_gemm_act(round_to<T>(acc[mt][nt][2 * h + 1] + b1), a.act));
        if constexpr (conv) {
          if (a.res) {
            const unsigned r = *reinterpret_cast<const unsigned*>(a.res + size_t(row) * size_t(a.ldres) + col);
            v0 = round_to<T>(tc_gemm_act(round_to<T>(v0 + bits_to_float<T>(r & 0xffffu)), a.post_act));
            v1 = round_to<T>(tc_gemm_act(round_to<T>(v1 + bits_to_float<T>(r >> 16)), a.post_act));
          }
        }
        if (a.y_f32) {
          float* y = static_cast<float*>(a.y) + size_t(row) * size_t(a.ldy) + col;
          y[0] = v0;
          if (col + 1 < a.cols) y[1] = v1;
        } else {  // cols (= ldy) is even: both columns are in the row
          *reinterpret_cast<unsigned*>(static_cast<uint16_t*>(a.y) + size_t(row) * size_t(a.ldy) + col) =
              Operand<T>::pack(v0, v1);
        }
      }
    }
}

// The order of fp16 / bf16 bits as an unsigned key (sign-magnitude to offset binary).
__host__ __device__ __forceinline__ unsigned tc_order_key(unsigned bits) {
  return bits & 0x8000u ? 0xffffu - bits : bits | 0x8000u;
}

// Piece i of tc_pool_forward: 8 channels (one 16-byte piece) of one output pixel, i running over
// (image, output row, output column, piece).
template <class T>
__host__ __device__ __forceinline__ void tc_pool_piece(const tcg::TcPoolArgs& a, long long i) {
  const int pieces = a.pitch / 8, ohw = a.oh * a.ow;
  const long long q = i / pieces;
  const int piece = int(i - q * pieces);
  const long long img = q / ohw;
  const int pix = int(q - img * ohw), oy = pix / a.ow, ox = pix - oy * a.ow;
  unsigned best[8], key[8];
  float sum[8];
  int inside = 0;
  for (int c = 0; c < 8; ++c) best[c] = 0xffffu, key[c] = 0, sum[c] = 0.0f;
  for (int ky = 0; ky < a.kh; ++ky) {
    const int iy = oy * a.sh - a.pt + ky;
    if (iy < 0 || iy >= a.h) continue;
    for (int kx = 0; kx < a.kw; ++kx) {
      const int ix = ox * a.sw - a.pl + kx;
      if (ix < 0 || ix >= a.w) continue;
      ++inside;
      const uint4 v = *reinterpret_cast<const uint4*>(
          a.x + ((size_t(img) * size_t(a.h) + size_t(iy)) * size_t(a.w) + size_t(ix)) * size_t(a.pitch) + piece * 8);
      const unsigned words[4] = {v.x, v.y, v.z, v.w};
      for (int c = 0; c < 8; ++c) {
        const unsigned bits = (words[c / 2] >> (16 * (c % 2))) & 0xffffu, k = tc_order_key(bits);
        if (a.average) sum[c] += bits_to_float<T>(bits);
        else if (k > key[c]) key[c] = k, best[c] = bits;
      }
    }
  }
  if (a.average) {
    const float divisor = a.count_include_pad ? float(a.kh * a.kw) : float(inside);
    for (int c = 0; c < 8; c += 2) {
      const unsigned w =
          Operand<T>::pack(divisor > 0 ? sum[c] / divisor : 0.0f, divisor > 0 ? sum[c + 1] / divisor : 0.0f);
      best[c] = w & 0xffffu, best[c + 1] = w >> 16;
    }
  }
  *reinterpret_cast<uint4*>(a.y + size_t(q) * size_t(a.pitch) + piece * 8) =
      make_uint4(best[0] | best[1] << 16, best[2] | best[3] << 16, best[4] | best[5] << 16, best[6] | best[7] << 16);
}

}  // namespace ENGINE_TC_ABI
}  // namespace engine::custom::tc

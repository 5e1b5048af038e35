#pragma once
// The body of tc_gemm_forward's kernel (tc_gemm.hpp says what it computes): one block of 4 warps
// computes a 64-row x 32-channel tile of the implicit GEMM. Per stage of k (64 bytes of operands):
// every thread gathers 16 (16-bit) or 32 (int8) input values of one row, converts them and stores
// them in shared memory; every thread copies 16 bytes of the converted weights; each warp then runs
// mma.sync on its 16 rows against the tile's 8-channel column groups. The next stage's input is
// loaded into registers while the current one multiplies. Host-callable for the emulated test
// (tests/gpu/emulated/custom_tc_gemm_emulated_test.cpp): the warp operations come from
// fused/tc_warp.cuh.
#include <cstdint>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/custom/fused/tc_warp.cuh"
#include "engine/custom/tc_gemm.hpp"
#include "engine/gpu/quantize_value.cuh"

namespace engine::custom::tc {
inline namespace ENGINE_TC_ABI {

__host__ __device__ __forceinline__ float tc_gemm_act(float v, Activation act) {
  switch (act) {
    case Activation::Relu: return v > 0.0f ? v : 0.0f;
    case Activation::Tanh: return tanhf(v);
    case Activation::Sigmoid: return 1.0f / (1.0f + expf(-v));
    case Activation::None: break;
  }
  return v;
}

// int8: the reference emulation's quantization (engine/gpu/quantize_value.cuh).
__host__ __device__ __forceinline__ int tc_quantize(float x, float s, float inv_s) {
  return gpu::quantize_int8_value(x, s, inv_s);
}

template <int kOps>  // TcGemmOperands
struct TcGemmTraits {
  static constexpr int kStageK = kOps == int(TcGemmOperands::INT8) ? 64 : 32;  // operands per stage
  static constexpr int kPerThread = kStageK / 2;  // input values a thread gathers per stage (one row, 2 threads)
};

// Packs a thread's kPerThread gathered values into 8 words (its 32 bytes of the stage row).
template <int kOps>
__host__ __device__ __forceinline__ void tc_gemm_pack(const float (&v)[TcGemmTraits<kOps>::kPerThread], float s,
                                                      float inv_s, unsigned (&w)[8]) {
  if constexpr (kOps == int(TcGemmOperands::INT8)) {
    for (int i = 0; i < 8; ++i) {
      unsigned word = 0;
      for (int b = 0; b < 4; ++b) word |= (unsigned(tc_quantize(v[4 * i + b], s, inv_s)) & 0xffu) << (8 * b);
      w[i] = word;
    }
  } else if constexpr (kOps == int(TcGemmOperands::BF16)) {
    for (int i = 0; i < 8; ++i) w[i] = Operand<__nv_bfloat16>::pack(v[2 * i], v[2 * i + 1]);
  } else {
    for (int i = 0; i < 8; ++i) w[i] = Operand<__half>::pack(v[2 * i], v[2 * i + 1]);
  }
}

// One block's tile: rows [block_m * 64, + 64) of M = n * OH * OW, channels [block_n * kCols, + kCols)
// (kCols: kTcGemmCols or kTcGemmWideCols).
template <int kOps, int kCols>
__host__ __device__ __forceinline__ void tc_gemm_block(const TcGemmArgs& a, int n, long long block_m, int block_n,
                                                       int tid, unsigned char* smem) {
  constexpr int kNt = kCols / 8;                                            // n-tiles of 8 channels
  constexpr int kCopies = kCols * kTcGemmStageBytes / 16 / kTcGemmThreads;  // 16-byte weight copies per thread
  using Traits = TcGemmTraits<kOps>;
  constexpr int kPer = Traits::kPerThread;
  const TcGemmShape& s = a.shape;
  const int ohw = s.out_height * s.out_width, hw = s.height * s.width, khw = s.kernel_h * s.kernel_w;
  const int K = s.k();
  const long long M = (long long)n * ohw;
  unsigned char* As = smem;                                    // [64][80 bytes]
  unsigned char* Bs = smem + kTcGemmRows * kTcGemmPitchBytes;  // [kCols][80 bytes]

  // The row this thread gathers: (image, output pixel) -> the input window's corner.
  const int r = tid / 2, half = tid % 2;
  const long long m = block_m * kTcGemmRows + r;
  const bool row_ok = m < M;
  const float* base = a.x;
  int iy0 = 0, ix0 = 0;
  if (row_ok) {
    const long long img = m / ohw;
    const int pix = int(m - img * ohw);
    base = a.x + img * (long long)(s.channels * hw);
    iy0 = (pix / s.out_width) * s.stride_h - s.pad_top;
    ix0 = (pix % s.out_width) * s.stride_w - s.pad_left;
  }
  float v[kPer];
  // A dense layer's row is kPer consecutive floats per stage: 16-byte loads where the rows are 16-byte
  // aligned (the generic gather spends ~10 instructions per operand on its indices and bounds).
  const bool flat_rows = khw == 1 && hw == 1 && s.channels % 4 == 0 &&
                         reinterpret_cast<unsigned long long>(a.x) % 16 == 0;
  auto gather = [&](int stage) {
    int k = stage * Traits::kStageK + half * kPer;
    if (k >= K || (flat_rows && !row_ok)) {  // all padding (small K: a 2x2 kernel on one channel has 4
                                             // of a stage's 32 or 64), or a row past M
#pragma unroll
      for (int i = 0; i < kPer; ++i) v[i] = 0.0f;
      return;
    }
    if (flat_rows && k + kPer <= K) {
      const float4* p = reinterpret_cast<const float4*>(base + k);
#pragma unroll
      for (int i = 0; i < kPer / 4; ++i) {
        const float4 q = p[i];
        v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
      }
      return;
    }
    int c = k / khw, rem = k - c * khw;
    int ky = rem / s.kernel_w, kx = rem - ky * s.kernel_w;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      float value = 0.0f;
      const int iy = iy0 + ky, ix = ix0 + kx;
      if (row_ok && k < K && iy >= 0 && iy < s.height && ix >= 0 && ix < s.width)
        value = base[(long long)c * hw + iy * s.width + ix];
      v[i] = value;
      ++k;
      if (++kx == s.kernel_w) {
        kx = 0;
        if (++ky == s.kernel_h) ky = 0, ++c;
      }
    }
  };
  // The weights this thread copies per stage: 16 bytes (copy j: piece (tid + 128 j) % 4 of channel row
  // (tid + 128 j) / 4 of the tile).
  const size_t row_bytes = size_t(a.k_padded) * size_t(kOps == int(TcGemmOperands::INT8) ? 1 : 2);
  const unsigned char* wsrc = static_cast<const unsigned char*>(a.weight) + size_t(block_n) * kCols * row_bytes;

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int col0 = block_n * kCols;
  const int ntiles = (s.out_channels - col0) >= kCols ? kNt : (s.out_channels - col0 + 7) / 8;
  float accf[kOps == int(TcGemmOperands::INT8) ? 1 : kNt][4] = {};
  int acci[kOps == int(TcGemmOperands::INT8) ? kNt : 1][4] = {};
  auto word = [](const unsigned char* p) { return *reinterpret_cast<const unsigned*>(p); };  // 4-byte aligned

  const int stages = a.k_padded / Traits::kStageK;
  const float inv_scale = a.in_scale != 0.0f ? 1.0f / a.in_scale : 0.0f;
  gather(0);
  for (int stage = 0; stage < stages; ++stage) {
    unsigned w[8];
    tc_gemm_pack<kOps>(v, a.in_scale, inv_scale, w);
    // 16-byte aligned: pitches and offsets are multiples of 16, and so are the buffers.
    uint4* arow_store = reinterpret_cast<uint4*>(As + r * kTcGemmPitchBytes + half * 32);
    arow_store[0] = make_uint4(w[0], w[1], w[2], w[3]);
    arow_store[1] = make_uint4(w[4], w[5], w[6], w[7]);
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int piece = tid + kTcGemmThreads * j;
      *reinterpret_cast<uint4*>(Bs + (piece / 4) * kTcGemmPitchBytes + (piece % 4) * 16) =
          *reinterpret_cast<const uint4*>(wsrc + size_t(piece / 4) * row_bytes + size_t(piece % 4) * 16 +
                                          size_t(stage) * kTcGemmStageBytes);
    }
    sync_block();
    if (stage + 1 < stages) gather(stage + 1);  // in flight while the tensor cores work
    const unsigned char* arow = As + (warp * 16 + g) * kTcGemmPitchBytes;
    if constexpr (kOps == int(TcGemmOperands::INT8)) {
#pragma unroll
      for (int kk = 0; kk < 64; kk += 32) {
        const unsigned a0 = word(arow + kk + 4 * t), a1 = word(arow + 8 * kTcGemmPitchBytes + kk + 4 * t);
        const unsigned a2 = word(arow + kk + 16 + 4 * t), a3 = word(arow + 8 * kTcGemmPitchBytes + kk + 16 + 4 * t);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          if (nt >= ntiles) break;  // uniform in the block; unrolled so the accumulators stay in registers
          const unsigned char* brow = Bs + (nt * 8 + g) * kTcGemmPitchBytes;
          mma_16832_s8(acci[nt], a0, a1, a2, a3, word(brow + kk + 4 * t), word(brow + kk + 16 + 4 * t));
        }
      }
    } else {
      using T = std::conditional_t<kOps == int(TcGemmOperands::BF16), __nv_bfloat16, __half>;
#pragma unroll
      for (int kk = 0; kk < 64; kk += 32) {  // bytes: 16 operands per mma
        const unsigned a0 = word(arow + kk + 4 * t), a1 = word(arow + 8 * kTcGemmPitchBytes + kk + 4 * t);
        const unsigned a2 = word(arow + kk + 16 + 4 * t), a3 = word(arow + 8 * kTcGemmPitchBytes + kk + 16 + 4 * t);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          if (nt >= ntiles) break;
          const unsigned char* brow = Bs + (nt * 8 + g) * kTcGemmPitchBytes;
          mma_16816<T>(accf[nt], a0, a1, a2, a3, word(brow + kk + 4 * t), word(brow + kk + 16 + 4 * t));
        }
      }
    }
    sync_block();
  }

  // Epilogue: accumulator i of column group nt is row g + 8 (i / 2), channel 2t + i % 2.
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (nt >= ntiles) break;
      const long long row = block_m * kTcGemmRows + warp * 16 + g + 8 * (i / 2);
      const int col = col0 + nt * 8 + 2 * t + i % 2;
      if (row >= M || col >= s.out_channels) continue;
      float value;
      if constexpr (kOps == int(TcGemmOperands::INT8))
        value = fmaf(float(acci[nt][i]), a.scale[col], a.bias[col]);
      else
        value = accf[nt][i] + a.bias[col];
      const long long img = row / ohw;
      const int pix = int(row - img * ohw);
      a.y[(img * s.out_channels + col) * ohw + pix] = tc_gemm_act(value, a.activation);
    }
}

}  // namespace ENGINE_TC_ABI
}  // namespace engine::custom::tc

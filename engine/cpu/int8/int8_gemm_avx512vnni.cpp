// The AVX-512 VNNI int8 product (int8_gemm.hpp), built with -mavx512f -mavx512bw -mavx512vnni and
// only called on a CPU that has them. Weights packed as [n/16][kp/4][16][4]: one 64-byte load is
// four k of sixteen output channels, which vpdpbusd multiplies by one broadcast group of four
// activation bytes. A micro-tile keeps NB x R accumulators (NB blocks of 16 channels, R rows of a)
// in registers for the whole of k.
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/int8/int8_gemm.hpp"

namespace engine::cpu::int8 {
namespace {

size_t packed_bytes(int n, int kp) { return size_t(round_up(n, 16)) * size_t(kp); }

void pack(const int8_t* w, int n, int kp, uint8_t* out) {
  const int blocks = round_up(n, 16) / 16;
  for (int b = 0; b < blocks; ++b)
    for (int k4 = 0; k4 < kp / 4; ++k4)
      for (int j = 0; j < 16; ++j)
        for (int t = 0; t < 4; ++t) {
          const int row = b * 16 + j;
          out[((size_t(b) * (kp / 4) + k4) * 16 + j) * 4 + t] =
              row < n ? uint8_t(w[size_t(row) * kp + k4 * 4 + t]) : uint8_t(0);
        }
}

template <int NB, int R>
void tile(const uint8_t* a, int kp, const uint8_t* w, size_t block_bytes, int32_t* c, int ldc) {
  __m512i acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_si512();
  const int k4s = kp / 4;
  for (int k4 = 0; k4 < k4s; ++k4) {
    __m512i wv[NB];
    for (int b = 0; b < NB; ++b) wv[b] = _mm512_loadu_si512(w + b * block_bytes + size_t(k4) * 64);
    for (int r = 0; r < R; ++r) {
      int32_t group;
      std::memcpy(&group, a + size_t(r) * kp + size_t(k4) * 4, 4);
      const __m512i av = _mm512_set1_epi32(group);
      for (int b = 0; b < NB; ++b) acc[b][r] = _mm512_dpbusd_epi32(acc[b][r], av, wv[b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) _mm512_storeu_si512(c + size_t(r) * ldc + b * 16, acc[b][r]);
}

using Tile = void (*)(const uint8_t*, int, const uint8_t*, size_t, int32_t*, int);

// Rows per micro-tile by blocks per micro-tile: NB * R <= 24 accumulators.
template <int NB>
Tile tile_for(int rows) {
  switch (rows) {
    case 1: return tile<NB, 1>;
    case 2: return tile<NB, 2>;
    case 3: return tile<NB, 3>;
    case 4: return tile<NB, 4>;
    case 5: return tile<NB, 5>;
    default: return tile<NB, 6>;
  }
}

void gemm(const uint8_t* a, int m, int kp, const uint8_t* packed, int n, int32_t* c, int ldc) {
  const int blocks = round_up(n, 16) / 16;
  const size_t block_bytes = size_t(kp) * 16;
  for (int b = 0; b < blocks;) {
    // Four blocks at a time where there are few rows (a dense layer's batch: weights dominate),
    // else two.
    const int nb = blocks - b >= 4 && m <= 3 ? 4 : blocks - b >= 2 ? 2 : 1;
    const int max_rows = nb == 4 ? 3 : nb == 2 ? 6 : 12;
    for (int i = 0; i < m;) {
      int rows = m - i < max_rows ? m - i : max_rows;
      if (nb == 1 && rows < 12 && rows > 6) rows = 6;  // tile<1, 12> only for whole twelves
      const uint8_t* ai = a + size_t(i) * kp;
      const uint8_t* wb = packed + size_t(b) * block_bytes;
      int32_t* ci = c + size_t(i) * ldc + b * 16;
      if (nb == 4) {
        tile_for<4>(rows)(ai, kp, wb, block_bytes, ci, ldc);
      } else if (nb == 2) {
        tile_for<2>(rows)(ai, kp, wb, block_bytes, ci, ldc);
      } else if (rows == 12) {
        tile<1, 12>(ai, kp, wb, block_bytes, ci, ldc);
      } else {
        tile_for<1>(rows)(ai, kp, wb, block_bytes, ci, ldc);
      }
      i += rows;
    }
    b += nb;
  }
}

}  // namespace

const Int8Gemm* int8_gemm_avx512vnni() {
  static const Int8Gemm set{"avx512-vnni", packed_bytes, pack, gemm};
  return &set;
}

}  // namespace engine::cpu::int8

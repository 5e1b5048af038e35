// The AVX-512 VNNI int8 product (int8_gemm.hpp), built with -mavx512f -mavx512bw -mavx512vnni and
// only called on a CPU that has them. Weights packed as [n/16][kp/4][16][4]: one 64-byte load is
// four k of sixteen output channels, which vpdpbusd multiplies by one broadcast group of four
// activation bytes. A micro-tile keeps NB x R accumulators (NB blocks of 16 channels, R rows of a)
// in registers for the whole of k.
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/int8/int8_gemm.hpp"
#include "engine/cpu/int8/int8_tiles.hpp"

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

template <int NB, int R>
struct Kernel {
  static void run(const uint8_t* a, int kp, const uint8_t* w, size_t block_bytes, int32_t* c, int ldc) {
    tile<NB, R>(a, kp, w, block_bytes, c, ldc);
  }
};

void gemm(const uint8_t* a, int m, int kp, const uint8_t* packed, int n, int32_t* c, int ldc) {
  const int blocks = round_up(n, 16) / 16;
  // Accumulators NB * R <= 24 of the 32 registers: four blocks of three rows where there are few
  // rows (a dense layer's batch: the weights dominate), else two blocks of six rows, or one block of
  // twelve (then of up to six for the rest).
  for_each_tile(a, m, kp, packed, blocks, 16, size_t(kp) * 16, c, ldc, [m](int blocks_left, int rows_left) {
    if (blocks_left >= 4 && m <= 3) return TileChoice{tile_for<Kernel, 4, 3>(rows_left), 4, rows_left < 3 ? rows_left : 3};
    if (blocks_left >= 2) return TileChoice{tile_for<Kernel, 2, 6>(rows_left), 2, rows_left < 6 ? rows_left : 6};
    if (rows_left >= 12) return TileChoice{Kernel<1, 12>::run, 1, 12};
    return TileChoice{tile_for<Kernel, 1, 6>(rows_left), 1, rows_left < 6 ? rows_left : 6};
  });
}

// int8_ops.hpp's quantize, 16 at a time: vdivps, vminps (a NaN becomes 127, as there), vmaxps,
// vcvtps2dq in the default rounding mode (to nearest even), vpmovdb.
void quantize_avx512(const float* x, int64_t n, float scale, uint8_t* q) {
  if (scale == 0.0f) {
    std::memset(q, 128, size_t(n));
    return;
  }
  const __m512 s = _mm512_set1_ps(scale), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
  const __m512i offset = _mm512_set1_epi32(128);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), s);
    v = _mm512_max_ps(_mm512_min_ps(v, hi), lo);
    const __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(v), offset);
    _mm512_mask_cvtepi32_storeu_epi8(q + i, m, r);
  }
}

// int8_ops.hpp's rational_tanh, 8 at a time, operation for operation.
__m256 tanh8(__m256 v) {
  auto k = [](float x) { return _mm256_set1_ps(x); };
  const __m256 c = _mm256_min_ps(_mm256_max_ps(v, k(-7.90531110763549805f)), k(7.90531110763549805f));
  const __m256 x2 = _mm256_mul_ps(c, c);
  __m256 p = k(-2.76076847742355e-16f);
  for (float a : {2.00018790482477e-13f, -8.60467152213735e-11f, 5.12229709037114e-08f, 1.48572235717979e-05f,
                  6.37261928875436e-04f, 4.89352455891786e-03f})
    p = _mm256_add_ps(_mm256_mul_ps(p, x2), k(a));
  p = _mm256_mul_ps(p, c);
  __m256 q = k(1.19825839466702e-06f);
  for (float b : {1.18534705686654e-04f, 2.26843463243900e-03f, 4.89352518554385e-03f})
    q = _mm256_add_ps(_mm256_mul_ps(q, x2), k(b));
  const __m256 r = _mm256_div_ps(p, q);
  const __m256 ax = _mm256_andnot_ps(k(-0.0f), v);
  return _mm256_blendv_ps(r, v, _mm256_cmp_ps(ax, k(0.0004f), _CMP_LT_OQ));
}

// int8_ops.hpp's requantize_rows, 8 channels at a time in double.
void requantize_rows_avx512(const int32_t* c, int ldc, int rows, int n, const int32_t* offset, const double* scale,
                            const double* bias, Act act, float* y) {
  const __m256 zero = _mm256_setzero_ps();
  for (int r = 0; r < rows; ++r) {
    const int32_t* cr = c + size_t(r) * ldc;
    float* yr = y + size_t(r) * n;
    for (int o = 0; o < n; o += 8) {
      const __mmask8 m = n - o >= 8 ? __mmask8(0xFF) : __mmask8((1u << (n - o)) - 1);
      const __m256i sum = _mm256_sub_epi32(_mm256_maskz_loadu_epi32(m, cr + o), _mm256_maskz_loadu_epi32(m, offset + o));
      const __m512d v = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(sum), _mm512_maskz_loadu_pd(m, scale + o)),
                                      _mm512_maskz_loadu_pd(m, bias + o));
      __m256 f = _mm512_cvtpd_ps(v);
      if (act == Act::Relu) f = _mm256_max_ps(f, zero);  // -0 and NaN to +0, as y > 0 ? y : 0
      if (act == Act::Tanh) f = tanh8(f);
      _mm256_mask_storeu_ps(yr + o, m, f);
    }
  }
}

}  // namespace

const Int8Gemm* int8_gemm_avx512vnni() {
  static const Int8Gemm set{"avx512-vnni", packed_bytes, pack, gemm, quantize_avx512, requantize_rows_avx512};
  return &set;
}

}  // namespace engine::cpu::int8

// The AVX2 int8 product (int8_gemm.hpp), built with -mavx2 -mfma and only called on a CPU that has both.
// vpmaddubsw would add two uint8 x int8 products in int16 with saturation (255 * 127 * 2 > 32767),
// so the weights are widened to int16 at packing and vpmaddwd sums pairs in int32, exactly.
// Weights packed as [n/8][kp/2][8][2] int16: one 32-byte load is two k of eight output channels.
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/int8/int8_gemm.hpp"
#include "engine/cpu/int8/int8_tiles.hpp"
#include "engine/cpu/int8/int8_ops.hpp"

namespace engine::cpu::int8 {
namespace {

size_t packed_bytes(int n, int kp) { return size_t(round_up(n, 8)) * size_t(kp) * sizeof(int16_t); }

void pack(const int8_t* w, int n, int kp, uint8_t* out) {
  const int blocks = round_up(n, 8) / 8;
  for (int b = 0; b < blocks; ++b)
    for (int k2 = 0; k2 < kp / 2; ++k2)
      for (int j = 0; j < 8; ++j)
        for (int t = 0; t < 2; ++t) {
          const int row = b * 8 + j;
          const int16_t v = row < n ? int16_t(w[size_t(row) * kp + k2 * 2 + t]) : int16_t(0);
          std::memcpy(out + (((size_t(b) * (kp / 2) + k2) * 8 + j) * 2 + t) * 2, &v, 2);
        }
}

template <int NB, int R>
void tile(const uint8_t* a, int kp, const uint8_t* w, size_t block_bytes, int32_t* c, int ldc) {
  __m256i acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm256_setzero_si256();
  for (int k2 = 0; k2 < kp / 2; ++k2) {
    __m256i wv[NB];
    for (int b = 0; b < NB; ++b)
      wv[b] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * block_bytes + size_t(k2) * 32));
    for (int r = 0; r < R; ++r) {
      const uint8_t* ak = a + size_t(r) * kp + size_t(k2) * 2;
      const __m256i av = _mm256_set1_epi32(int32_t(uint32_t(ak[0]) | uint32_t(ak[1]) << 16));
      for (int b = 0; b < NB; ++b) acc[b][r] = _mm256_add_epi32(acc[b][r], _mm256_madd_epi16(av, wv[b]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + size_t(r) * ldc + b * 8), acc[b][r]);
}

template <int NB, int R>
struct Kernel {
  static void run(const uint8_t* a, int kp, const uint8_t* w, size_t block_bytes, int32_t* c, int ldc) {
    tile<NB, R>(a, kp, w, block_bytes, c, ldc);
  }
};

void gemm(const uint8_t* a, int m, int kp, const uint8_t* packed, int n, int32_t* c, int ldc) {
  // Two blocks of eight channels by four rows: 8 of the 16 registers accumulate.
  for_each_tile(a, m, kp, packed, round_up(n, 8) / 8, 8, size_t(kp) * 8 * sizeof(int16_t), c, ldc,
                [](int blocks_left, int rows_left) {
                  const int rows = rows_left < 4 ? rows_left : 4;
                  if (blocks_left >= 2) return TileChoice{tile_for<Kernel, 2, 4>(rows), 2, rows};
                  return TileChoice{tile_for<Kernel, 1, 4>(rows), 1, rows};
                });
}

// int8_ops.hpp's rational_tanh, operation for operation, on x[0..n), four vectors of 8 at a time
// (each a long chain of dependent operations: four side by side keep the units busy), the last
// few elements by the scalar form.
void tanh_inplace(float* x, int64_t n) {
  auto k = [](float v) { return _mm256_set1_ps(v); };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 v[4], c[4], x2[4], p[4], q[4];
    for (int u = 0; u < 4; ++u) {
      v[u] = _mm256_loadu_ps(x + i + 8 * u);
      c[u] = _mm256_min_ps(_mm256_max_ps(v[u], k(-7.90531110763549805f)), k(7.90531110763549805f));
      x2[u] = _mm256_mul_ps(c[u], c[u]);
      p[u] = k(-2.76076847742355e-16f);
      q[u] = k(1.19825839466702e-06f);
    }
    for (float a : {2.00018790482477e-13f, -8.60467152213735e-11f, 5.12229709037114e-08f, 1.48572235717979e-05f,
                    6.37261928875436e-04f, 4.89352455891786e-03f})
      for (int u = 0; u < 4; ++u) p[u] = _mm256_fmadd_ps(p[u], x2[u], k(a));
    for (float b : {1.18534705686654e-04f, 2.26843463243900e-03f, 4.89352518554385e-03f})
      for (int u = 0; u < 4; ++u) q[u] = _mm256_fmadd_ps(q[u], x2[u], k(b));
    for (int u = 0; u < 4; ++u) {
      const __m256 r = _mm256_div_ps(_mm256_mul_ps(p[u], c[u]), q[u]);
      const __m256 ax = _mm256_andnot_ps(k(-0.0f), v[u]);
      _mm256_storeu_ps(x + i + 8 * u, _mm256_blendv_ps(r, v[u], _mm256_cmp_ps(ax, k(0.0004f), _CMP_LT_OQ)));
    }
  }
  for (; i < n; ++i) x[i] = rational_tanh(x[i]);
}

// requantize_rows, with its tanh vectorised.
void requantize_rows_avx2(const int32_t* c, int ldc, int rows, int n, const int32_t* offset, const double* scale,
                          const double* bias, Act act, float* y) {
  requantize_rows(c, ldc, rows, n, offset, scale, bias, act == Act::Tanh ? Act::None : act, y);
  if (act == Act::Tanh) tanh_inplace(y, int64_t(rows) * n);
}

}  // namespace

const Int8Gemm* int8_gemm_avx2() {
  static const Int8Gemm set{"avx2", packed_bytes, pack, gemm, quantize, requantize_rows_avx2};
  return &set;
}

}  // namespace engine::cpu::int8

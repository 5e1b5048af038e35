// The AVX-512 VNNI int8 product (int8_gemm.hpp), built with -mavx512f -mavx512bw -mavx512vnni and
// only called on a CPU that has them. Weights packed as [n/16][kp/4][16][4]: one 64-byte load is
// four k of sixteen output channels, which vpdpbusd multiplies by one broadcast group of four
// activation bytes. A micro-tile keeps NB x R accumulators (NB blocks of 16 channels, R rows of a)
// in registers for the whole of k.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

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

// int8_ops.hpp's rational_tanh, operation for operation, on four vectors of 16 at once: each is a
// long chain of dependent operations, so four side by side keep the floating-point units busy.
void tanh64(__m512* v) {
  auto k = [](float x) { return _mm512_set1_ps(x); };
  __m512 c[4], x2[4], p[4], q[4];
  for (int u = 0; u < 4; ++u) {
    c[u] = _mm512_min_ps(_mm512_max_ps(v[u], k(-7.90531110763549805f)), k(7.90531110763549805f));
    x2[u] = _mm512_mul_ps(c[u], c[u]);
    p[u] = k(-2.76076847742355e-16f);
    q[u] = k(1.19825839466702e-06f);
  }
  for (float a : {2.00018790482477e-13f, -8.60467152213735e-11f, 5.12229709037114e-08f, 1.48572235717979e-05f,
                  6.37261928875436e-04f, 4.89352455891786e-03f})
    for (int u = 0; u < 4; ++u) p[u] = _mm512_fmadd_ps(p[u], x2[u], k(a));
  for (float b : {1.18534705686654e-04f, 2.26843463243900e-03f, 4.89352518554385e-03f})
    for (int u = 0; u < 4; ++u) q[u] = _mm512_fmadd_ps(q[u], x2[u], k(b));
  for (int u = 0; u < 4; ++u) {
    const __m512 r = _mm512_div_ps(_mm512_mul_ps(p[u], c[u]), q[u]);
    const __m512 ax = _mm512_abs_ps(v[u]);
    v[u] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, k(0.0004f), _CMP_LT_OQ), r, v[u]);
  }
}

// x[i] = rational_tanh(x[i]) for i < n, 64 at a time.
void tanh_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 64) {
    __m512 v[4];
    __mmask16 m[4];
    for (int u = 0; u < 4; ++u) {
      const int64_t left = n - i - 16 * u;
      m[u] = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      v[u] = _mm512_maskz_loadu_ps(m[u], x + i + 16 * u);
    }
    tanh64(v);
    for (int u = 0; u < 4; ++u) _mm512_mask_storeu_ps(x + i + 16 * u, m[u], v[u]);
  }
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
      _mm256_mask_storeu_ps(yr + o, m, f);
    }
  }
  if (act == Act::Tanh) tanh_inplace(y, int64_t(rows) * n);
}

// The sums of P groups of 16 pixels (PlaneGroup) for N channels (`w`: their block of taps): one
// vpdpbusd per channel, group and four taps, each weight broadcast once for the P groups.
template <int N, int P>
void plane_sums(const PlaneConv& c, const PlaneGroup* g, const int32_t* w, __m512i* acc) {
  __m512i dwords[P], bytes[P];
  const uint8_t* src[P];
  for (int u = 0; u < P; ++u) {
    dwords[u] = _mm512_loadu_si512(g[u].dwords);
    bytes[u] = _mm512_loadu_si512(g[u].bytes);
    src[u] = c.padded + g[u].origin;
  }
  for (int o = 0; o < N * P; ++o) acc[o] = _mm512_setzero_si512();
  for (int t = 0; t < c.tap_groups; ++t) {
    __m512i a[P];
    for (int u = 0; u < P; ++u)
      a[u] = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(dwords[u], _mm512_loadu_si512(src[u] + c.tap_offsets[t])),
                                 bytes[u]);
    for (int o = 0; o < N; ++o) {
      const __m512i wv = _mm512_set1_epi32(w[size_t(t) * 16 + o]);
      for (int u = 0; u < P; ++u) acc[u * N + o] = _mm512_dpbusd_epi32(acc[u * N + o], a[u], wv);
    }
  }
}

// requantize_rows' operations on 8 sums of channel o (tanh: tanh_inplace on the planes afterwards).
__m256 requantize8(__m256i sums, const PlaneConv& c, int o) {
  const __m256i s = _mm256_sub_epi32(sums, _mm256_set1_epi32(c.offset[o]));
  const __m512d v = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(s), _mm512_set1_pd(c.scale[o])),
                                  _mm512_set1_pd(c.bias[o]));
  __m256 f = _mm512_cvtpd_ps(v);
  if (c.act == Act::Relu) f = _mm256_max_ps(f, _mm256_setzero_ps());  // -0 and NaN to +0, as y > 0 ? y : 0
  return f;
}

// Channels [o0, o0 + N) of every group into `planes` ([n][ld] floats): two groups at a time where
// the accumulators fit in registers.
template <int N>
void plane_channels(const PlaneConv& c, int count, int o0, float* planes, int ld) {
  constexpr int P = N <= 12 ? 2 : 1;
  __m512i acc[N * P];
  const int32_t* w = c.taps + size_t(o0 / 16) * c.tap_groups * 16;
  for (int g = 0; g < count;) {
    const int p = P == 2 && count - g >= 2 ? 2 : 1;
    if (p == 2) plane_sums<N, P>(c, c.groups + g, w, acc);
    else plane_sums<N, 1>(c, c.groups + g, w, acc);
    for (int u = 0; u < p; ++u)
      for (int o = 0; o < N; ++o) {
        float* r = planes + size_t(o0 + o) * ld + 16 * (g + u);
        _mm256_storeu_ps(r, requantize8(_mm512_castsi512_si256(acc[u * N + o]), c, o0 + o));
        _mm256_storeu_ps(r + 8, requantize8(_mm512_extracti64x4_epi64(acc[u * N + o], 1), c, o0 + o));
      }
    g += p;
  }
}

template <int... N>
void plane_channels_of(int channels, const PlaneConv& c, int count, int o0, float* planes, int ld,
                       std::integer_sequence<int, N...>) {
  using Channels = void (*)(const PlaneConv&, int, int, float*, int);
  static constexpr Channels run[] = {plane_channels<N + 1>...};
  run[channels - 1](c, count, o0, planes, ld);
}

// The pool of conv rows r0, r1 (channel planes `ld` apart) into `out` ([n][pld]), `chunks` of 32
// columns: maxpool's max(max(max(max(-inf, a), b), c), d) (std::max(m, v) is vmaxps(v, m)) or
// avgpool's ((((0 + a) + b) + c) + d) / 4 in double.
void pool_rows(const PlaneConv& c, const float* r0, const float* r1, int ld, int chunks, float* out, int pld) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int o = 0; o < c.n; ++o)
    for (int k = 0; k < chunks; ++k) {
      const float* x0 = r0 + size_t(o) * ld + 32 * k;
      const float* x1 = r1 + size_t(o) * ld + 32 * k;
      const __m512 a0 = _mm512_loadu_ps(x0), a1 = _mm512_loadu_ps(x0 + 16);
      const __m512 b0 = _mm512_loadu_ps(x1), b1 = _mm512_loadu_ps(x1 + 16);
      const __m512 a = _mm512_permutex2var_ps(a0, even, a1), b = _mm512_permutex2var_ps(a0, odd, a1);
      const __m512 cc = _mm512_permutex2var_ps(b0, even, b1), d = _mm512_permutex2var_ps(b0, odd, b1);
      float* y = out + size_t(o) * pld + 16 * k;
      if (c.pool == Pool::Max) {
        __m512 m = _mm512_max_ps(a, _mm512_set1_ps(-std::numeric_limits<float>::infinity()));
        m = _mm512_max_ps(b, m);
        m = _mm512_max_ps(cc, m);
        _mm512_storeu_ps(y, _mm512_max_ps(d, m));
        continue;
      }
      for (int h = 0; h < 2; ++h) {
        auto half = [h](__m512 v) {
          return _mm512_cvtps_pd(h == 0 ? _mm512_castps512_ps256(v)
                                        : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        };
        __m512d s = _mm512_add_pd(_mm512_setzero_pd(), half(a));
        s = _mm512_add_pd(_mm512_add_pd(_mm512_add_pd(s, half(b)), half(cc)), half(d));
        _mm256_storeu_ps(y + 8 * h, _mm512_cvtpd_ps(_mm512_div_pd(s, _mm512_set1_pd(4.0))));
      }
    }
}

// Columns [0, width) of planes [n][ld] as NHWC pixels of n channels.
void to_pixels(const float* planes, int n, int ld, int width, float* y) {
  for (int j = 0; j < width; ++j)
    for (int o = 0; o < n; ++o) y[size_t(j) * n + o] = planes[size_t(o) * ld + j];
}

void plane_conv(const PlaneConv& c) {
  const int pixels = c.out_h * c.out_w, count = (pixels + 15) / 16, ld = 16 * count;
  float* planes = c.scratch;
  for (int o0 = 0; o0 < c.n; o0 += 16)
    plane_channels_of(std::min(16, c.n - o0), c, count, o0, planes, ld, std::make_integer_sequence<int, 16>{});
  if (c.act == Act::Tanh) tanh_inplace(planes, int64_t(c.n) * ld);
  if (c.pool == Pool::None) {
    to_pixels(planes, c.n, ld, pixels, c.y);
    return;
  }
  // Pooled rows: 32 conv columns a chunk, read past a row's end into the next (or the 32 floats
  // of slack after the planes): those lanes' results are not kept.
  const int ph = c.out_h / 2, pw = c.out_w / 2, pld = (pw + 15) / 16 * 16;
  float* pooled = planes + size_t(c.n) * ld + 32;
  for (int i = 0; i < ph; ++i) {
    const float* r0 = planes + size_t(2 * i) * c.out_w;
    pool_rows(c, r0, r0 + c.out_w, ld, pld / 16, pooled, pld);
    to_pixels(pooled, c.n, pld, pw, c.y + size_t(i) * pw * c.n);
  }
}

}  // namespace

const Int8Gemm* int8_gemm_avx512vnni() {
  static const Int8Gemm set{"avx512-vnni", packed_bytes, pack, gemm, quantize_avx512, requantize_rows_avx512, plane_conv};
  return &set;
}

}  // namespace engine::cpu::int8

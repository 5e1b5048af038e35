#pragma once
// SIMD register types for the fast cpu backend's kernels (kernels.hpp). Each is a struct of static
// functions over one register type, so a kernel template instantiated with it compiles to that
// instruction set only. Included by exactly one translation unit per instruction set
// (kernels_avx2.cpp is compiled with -mavx2 -mfma, kernels_sse2.cpp with the x86-64 baseline), each
// inside its own namespace, so no inline function with AVX2 code can be picked by the linker for
// code that runs on a CPU without it.
//
// fma(a, b, c) is a * b + c: one rounding where the instruction set has FMA (AVX2+FMA), two where it
// does not (SSE2). Every kernel uses the same operation sequence per output element whatever the
// data layout, so with one instruction set the results are bitwise identical for any batch split.
#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#if defined(ENGINE_CPU_AVX512)
// AVX-512F (16 lanes, FMA). Zen 4 runs it as two 256-bit halves, so the gain over AVX2 is not more
// FLOPs per cycle but twice the registers (32) and half the instructions per FLOP.
struct Avx512 {
  static constexpr int W = 16;
  static constexpr int kAccumulators = 24;  // conv register block: 24 of the 32 registers
  static constexpr const char* name = "avx512f";
  using V = __m512;
  using Mask = __mmask16;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_u8(const uint8_t* p) {  // W bytes, each converted exactly
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  static V zero() { return _mm512_setzero_ps(); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float fma1(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
  }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static Mask lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static V select(Mask m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }  // m ? a : b
  static V bits(__m512i i) { return _mm512_castsi512_ps(i); }
  static __m512i ints(V v) { return _mm512_castps_si512(v); }
  static V andn(V a, V b) { return bits(_mm512_andnot_si512(ints(a), ints(b))); }
  static V and_(V a, V b) { return bits(_mm512_and_si512(ints(a), ints(b))); }
  static V or_(V a, V b) { return bits(_mm512_or_si512(ints(a), ints(b))); }
  static V xor_(V a, V b) { return bits(_mm512_xor_si512(ints(a), ints(b))); }
  static V round(V x) { return _mm512_cvtepi32_ps(_mm512_cvtps_epi32(x)); }
  static V pow2(V n) {
    const __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(i, 23));
  }
  // Stores the first n lanes (0 <= n <= W); nothing past them is touched.
  static void store_first(float* p, V v, int n) { _mm512_mask_storeu_ps(p, Mask((1u << n) - 1u), v); }
  // Loads the first n lanes (0 <= n <= W), zero past them; nothing past them is read.
  static V load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask((1u << n) - 1u), p); }
  // r[i][j] -> r[j][i] for a W x W block: 4 x 4 transposes inside each 128-bit lane (unpack ps,
  // then pd), then the 4 x 4 transpose of the lanes themselves (two rounds of shuffle_f32x4).
  [[gnu::always_inline]] static void transpose(V* r) {
    V t[16], u[16];
    for (int k = 0; k < 8; ++k) {
      t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
      t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    auto lo = [](V a, V b) { return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
    auto hi = [](V a, V b) { return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
    for (int g = 0; g < 4; ++g) {  // u[4g + j], lane L: column 4L + j of rows 4g..4g+3
      u[4 * g] = lo(t[4 * g], t[4 * g + 2]);
      u[4 * g + 1] = hi(t[4 * g], t[4 * g + 2]);
      u[4 * g + 2] = lo(t[4 * g + 1], t[4 * g + 3]);
      u[4 * g + 3] = hi(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int j = 0; j < 4; ++j) {
      const V p = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44), q = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
      const V a = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44), b = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
      r[j] = _mm512_shuffle_f32x4(p, a, 0x88);
      r[4 + j] = _mm512_shuffle_f32x4(p, a, 0xDD);
      r[8 + j] = _mm512_shuffle_f32x4(q, b, 0x88);
      r[12 + j] = _mm512_shuffle_f32x4(q, b, 0xDD);
    }
  }
};
#endif

#if defined(ENGINE_CPU_AVX2)
struct Avx2 {
  static constexpr int W = 8;
  static constexpr int kAccumulators = 12;  // conv register block: 12 of the 16 registers
  using Mask = __m256;
  static constexpr const char* name = "avx2+fma";
  using V = __m256;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_u8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V zero() { return _mm256_setzero_ps(); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float fma1(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
  }
  // maxps semantics: a > b ? a : b (b when either is NaN); max1 is the same on one lane.
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static Mask lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static V select(Mask mask, V a, V b) { return _mm256_blendv_ps(b, a, mask); }  // mask ? a : b
  static V andn(V a, V b) { return _mm256_andnot_ps(a, b); }                   // ~a & b
  static V and_(V a, V b) { return _mm256_and_ps(a, b); }
  static V or_(V a, V b) { return _mm256_or_ps(a, b); }
  static V xor_(V a, V b) { return _mm256_xor_ps(a, b); }
  // round to nearest (default MXCSR), returned as float, and 2^n for that integer n
  static V round(V x) { return _mm256_cvtepi32_ps(_mm256_cvtps_epi32(x)); }
  static V pow2(V n) {
    const __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(i, 23));
  }
  // r[i][j] -> r[j][i] for a W x W block: 4 x 4 inside each 128-bit lane, then the lanes swapped.
  static void transpose(V* r) {
    V t[8], u[8];
    for (int k = 0; k < 4; ++k) {
      t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
      t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int g = 0; g < 2; ++g) {
      u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
      u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
      u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
      u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int j = 0; j < 4; ++j) {
      r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
      r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
  }
};
#endif

#if defined(ENGINE_CPU_SSE2)
struct Sse2 {
  static constexpr int W = 4;
  static constexpr int kAccumulators = 12;
  using Mask = __m128;
  static constexpr const char* name = "sse2 (portable x86-64, no FMA)";
  using V = __m128;
  static V load(const float* p) { return _mm_loadu_ps(p); }
  static V load_u8(const uint8_t* p) {
    int32_t four;
    __builtin_memcpy(&four, p, 4);
    const __m128i z = _mm_setzero_si128();
    return _mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(four), z), z));
  }
  static void store(float* p, V v) { _mm_storeu_ps(p, v); }
  static V set1(float x) { return _mm_set1_ps(x); }
  static V bcast(const float* p) { return _mm_load1_ps(p); }
  static V zero() { return _mm_setzero_ps(); }
  static V add(V a, V b) { return _mm_add_ps(a, b); }
  static V sub(V a, V b) { return _mm_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm_mul_ps(a, b); }
  static V div(V a, V b) { return _mm_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
  static float fma1(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_add_ss(_mm_mul_ss(_mm_set_ss(a), _mm_set_ss(b)), _mm_set_ss(c)));
  }
  static V max(V a, V b) { return _mm_max_ps(a, b); }
  static V min(V a, V b) { return _mm_min_ps(a, b); }
  static Mask lt(V a, V b) { return _mm_cmplt_ps(a, b); }
  static V select(Mask mask, V a, V b) { return _mm_or_ps(_mm_and_ps(mask, a), _mm_andnot_ps(mask, b)); }
  static V andn(V a, V b) { return _mm_andnot_ps(a, b); }
  static V and_(V a, V b) { return _mm_and_ps(a, b); }
  static V or_(V a, V b) { return _mm_or_ps(a, b); }
  static V xor_(V a, V b) { return _mm_xor_ps(a, b); }
  static V round(V x) { return _mm_cvtepi32_ps(_mm_cvtps_epi32(x)); }
  static V pow2(V n) {
    const __m128i i = _mm_add_epi32(_mm_cvtps_epi32(n), _mm_set1_epi32(127));
    return _mm_castsi128_ps(_mm_slli_epi32(i, 23));
  }
  static void transpose(V* r) { _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]); }
};
#endif

// The vector math shared by every instruction set: exp (Cephes expf: Cody-Waite reduction and a
// degree-6 polynomial, about 1 ulp) and the logistic built on it, and a rational tanh. Inputs are clamped so
// 2^n stays a normal float; the clamps change results only where the true value is below 1e-37 or
// rounds to 1 anyway.
template <class S>
struct VMath {
  using V = typename S::V;
  static V exp(V x) {
    x = S::min(S::max(x, S::set1(-87.0f)), S::set1(88.0f));
    const V n = S::round(S::mul(x, S::set1(1.44269504088896341f)));
    V r = S::sub(x, S::mul(n, S::set1(0.693359375f)));
    r = S::sub(r, S::mul(n, S::set1(-2.12194440e-4f)));
    V p = S::set1(1.9875691500e-4f);
    p = S::fma(p, r, S::set1(1.3981999507e-3f));
    p = S::fma(p, r, S::set1(8.3334519073e-3f));
    p = S::fma(p, r, S::set1(4.1665795894e-2f));
    p = S::fma(p, r, S::set1(1.6666665459e-1f));
    p = S::fma(p, r, S::set1(5.0000001201e-1f));
    p = S::fma(p, S::mul(r, r), S::add(r, S::set1(1.0f)));
    return S::mul(p, S::pow2(n));
  }
  // A 13/6 rational minimax approximation (Eigen's float tanh): odd numerator, even denominator,
  // one division, no exp; x clamped to +-7.9053 where the float result is 1. About half the
  // instructions of 1 - 2/(exp(2x)+1), which matters: LeNet's c1 does 25 multiply-adds per output
  // and then one tanh. Below |x| = 4e-4 it returns x itself (the rational form's relative error
  // grows there; tanh(x) rounds to x in float).
  static V tanh(V x) {
    const V c = S::min(S::max(x, S::set1(-7.90531110763549805f)), S::set1(7.90531110763549805f));
    const V x2 = S::mul(c, c);
    V p = S::set1(-2.76076847742355e-16f);
    p = S::fma(p, x2, S::set1(2.00018790482477e-13f));
    p = S::fma(p, x2, S::set1(-8.60467152213735e-11f));
    p = S::fma(p, x2, S::set1(5.12229709037114e-08f));
    p = S::fma(p, x2, S::set1(1.48572235717979e-05f));
    p = S::fma(p, x2, S::set1(6.37261928875436e-04f));
    p = S::fma(p, x2, S::set1(4.89352455891786e-03f));
    p = S::mul(p, c);
    V q = S::set1(1.19825839466702e-06f);
    q = S::fma(q, x2, S::set1(1.18534705686654e-04f));
    q = S::fma(q, x2, S::set1(2.26843463243900e-03f));
    q = S::fma(q, x2, S::set1(4.89352518554385e-03f));
    const V ax = S::andn(S::set1(-0.0f), x);
    return S::select(S::lt(ax, S::set1(0.0004f)), x, S::div(p, q));
  }
  static V sigmoid(V x) {
    return S::div(S::set1(1.0f), S::add(S::set1(1.0f), exp(S::sub(S::zero(), x))));
  }
};

#include "engine/bench/cpu_fma_peak.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace engine::bench {
namespace {

// Each function runs `iters` rounds of kChains independent x = x * a + b chains (one FMA each) and
// returns a value depending on all of them, so none is optimised away. kChains covers latency (4-5
// cycles) x FMA ports (2) with room to spare. The chain loop is unrolled in full: otherwise GCC keeps
// the chains in memory, and a store-to-load round trip per FMA measures under half the peak.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
constexpr int kChains512 = 24, kChains256 = 12;

__attribute__((target("avx512f"))) float chains_avx512(int64_t iters, float seed) {
  __m512 x[kChains512];
  for (int k = 0; k < kChains512; ++k) x[k] = _mm512_set1_ps(seed + float(k) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.99999f), b = _mm512_set1_ps(1e-5f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int k = 0; k < kChains512; ++k) x[k] = _mm512_fmadd_ps(x[k], a, b);
  }
  __m512 s = x[0];
  for (int k = 1; k < kChains512; ++k) s = _mm512_add_ps(s, x[k]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float chains_avx2(int64_t iters, float seed) {
  __m256 x[kChains256];
  for (int k = 0; k < kChains256; ++k) x[k] = _mm256_set1_ps(seed + float(k) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.99999f), b = _mm256_set1_ps(1e-5f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int k = 0; k < kChains256; ++k) x[k] = _mm256_fmadd_ps(x[k], a, b);
  }
  __m256 s = x[0];
  for (int k = 1; k < kChains256; ++k) s = _mm256_add_ps(s, x[k]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

// Without FMA: kChains256 chains of 4 lanes, a multiply and an add each (2 flops per lane too).
float chains_sse2(int64_t iters, float seed) {
  constexpr int kLanes = 48;
  float x[kLanes];
  for (int k = 0; k < kLanes; ++k) x[k] = seed + float(k) * 1e-3f;
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 48
    for (int k = 0; k < kLanes; ++k) x[k] = x[k] * 0.99999f + 1e-5f;
  }
  float s = 0;
  for (float v : x) s += v;
  return s;
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

enum class Isa { Avx512, Avx2, Sse2 };
Isa best_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
  return Isa::Sse2;
}

// Flops one round of the chosen function does.
double flops_per_round(Isa isa) {
  switch (isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    case Isa::Avx512: return 2.0 * 16 * kChains512;
    case Isa::Avx2: return 2.0 * 8 * kChains256;
#endif
    default: return 2.0 * 48;
  }
}

float run_chains(Isa isa, int64_t iters, float seed) {
  switch (isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    case Isa::Avx512: return chains_avx512(iters, seed);
    case Isa::Avx2: return chains_avx2(iters, seed);
#endif
    default: return chains_sse2(iters, seed);
  }
}

}  // namespace

const char* cpu_fma_peak_isa() {
  switch (best_isa()) {
    case Isa::Avx512: return "avx512f";
    case Isa::Avx2: return "avx2+fma";
    default: return "sse2";
  }
}

double cpu_fma_peak_gflops(int threads, double seconds) {
  const Isa isa = best_isa();
  double best = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    int64_t iters = 1 << 12;
    double elapsed = 0;
    float sink = 0;
    do {
      iters *= 2;
      // Each thread's own CPU time, the longest of them: the cores' rate while they run, not
      // lowered by other processes' time slices on a shared machine.
      elapsed = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink) reduction(max : elapsed)
      {
        const double t0 = thread_cpu_seconds();
        sink += run_chains(isa, iters, float(omp_get_thread_num()) * 1e-3f);
        elapsed = thread_cpu_seconds() - t0;
      }
    } while (elapsed < seconds && iters < (int64_t(1) << 40));
    if (sink == -1.0f) std::fprintf(stderr, " ");  // keeps the result alive
    if (elapsed > 0) best = std::max(best, flops_per_round(isa) * double(iters) * threads / elapsed / 1e9);
  }
  return best;
}

}  // namespace engine::bench

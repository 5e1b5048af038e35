// Batch-1 dense (GEMV) with weights in L2: does the packed layout matter? Compares the k-major blocks
// of 16 units read as 8 streams (the cpu backend's layout) against one k-major panel of 128 units
// (one stream), and the blocked layout with software prefetch. Same arithmetic in all three.
//   c++ -O3 -mavx512f -mfma -ffp-contract=off dev/cpu/dense/gemv_layout.cpp -o /tmp/gemv_layout
//   taskset -c 0 /tmp/gemv_layout [k=784] [units=128]
#include <immintrin.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

static double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// y[128] = W x, weights of 8 blocks: block b at w + b * k * 16, [k][16]; panel stride p (16 or 128).
template <bool kPrefetch>
static void gemv8(const float* w, int64_t block_stride, int64_t row_stride, const float* x, int64_t k, float* y) {
  __m512 acc[8];
  for (int b = 0; b < 8; ++b) acc[b] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    const __m512 xb = _mm512_set1_ps(x[i]);
    for (int b = 0; b < 8; ++b) {
      const float* p = w + b * block_stride + i * row_stride;
      if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(p + 16 * row_stride), _MM_HINT_T0);
      acc[b] = _mm512_fmadd_ps(_mm512_loadu_ps(p), xb, acc[b]);
    }
  }
  for (int b = 0; b < 8; ++b) _mm512_storeu_ps(y + 16 * b, acc[b]);
}

int main(int argc, char** argv) {
  const int64_t k = argc > 1 ? atoll(argv[1]) : 784, units = argc > 2 ? atoll(argv[2]) : 128;
  std::vector<float> w(static_cast<size_t>(k * units)), x(static_cast<size_t>(k)), y(static_cast<size_t>(units));
  for (auto& v : w) v = float(rand() % 100) / 100.0f;
  for (auto& v : x) v = float(rand() % 100) / 100.0f;
  // Best of 5 batches of 2,000 calls, thread CPU time.
  auto time = [&](const char* name, auto fn) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = thread_seconds();
      for (int call = 0; call < 2000; ++call) fn();
      best = std::min(best, (thread_seconds() - t0) / 2000);
    }
    std::printf("%-28s %8.3f us  %6.1f GB/s\n", name, best * 1e6, double(k * units * 4) / best / 1e9);
  };
  const int64_t groups = units / 128;
  time("blocks of 16 (8 streams)", [&] {
    for (int64_t g = 0; g < groups; ++g) gemv8<false>(w.data() + g * k * 128, k * 16, 16, x.data(), k, y.data());
  });
  time("blocks of 16 + prefetch", [&] {
    for (int64_t g = 0; g < groups; ++g) gemv8<true>(w.data() + g * k * 128, k * 16, 16, x.data(), k, y.data());
  });
  time("panel of 128 (1 stream)", [&] {
    for (int64_t g = 0; g < groups; ++g) gemv8<false>(w.data() + g * k * 128, 16, 128, x.data(), k, y.data());
  });
  time("panel of 128 + prefetch", [&] {
    for (int64_t g = 0; g < groups; ++g) gemv8<true>(w.data() + g * k * 128, 16, 128, x.data(), k, y.data());
  });
}

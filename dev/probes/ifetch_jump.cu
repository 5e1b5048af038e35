// What does a jump into code not yet run cost on this GPU, and does the code stay cached from one
// launch to the next? (The image chain's phases begin with such jumps: Nsight Compute puts warp
// samples on `no_instruction` at their first lines.) ifetch.cu times straight-line code, which the
// fetcher streams ahead of a 4-cycle FMA chain; this one times calls of small functions (a 16-step
// dependent FMA chain, floor 64 cycles), each the first run of its code in the block, against the
// same call again.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. dev/probes/ifetch_jump.cu -o /tmp/ifj && /tmp/ifj
// Per launch (one block per SM, one warp timing): the median over blocks of each function's first
// call and second call, in cycles; mode 1 lets a warp of another SM sub-partition call every
// function first (does an idle warp warm the code for the busy one?); launches repeat, so launch 1
// onwards shows whether the previous launch's fetches are still cached on the same SMs.
#include <algorithm>
#include <vector>

#include "probe_support.cuh"

constexpr int kFuncs = 8;

// 16 dependent FMAs, each function its own code (the constant differs), padded apart by a 512-step
// tail run only when `fill` is set, so that no two chains share an instruction-cache line or a
// prefetch run (the functions are laid out one after another).
#define CHAIN_FN(k)                                                                    \
  __device__ __noinline__ float chain##k(float x, float a, int fill) {                 \
    _Pragma("unroll") for (int i = 0; i < 16; ++i) x = fmaf(x, a, float(k + 1));        \
    if (fill) {                                                                        \
      _Pragma("unroll") for (int i = 0; i < 512; ++i) x = fmaf(x, a, 0.5f * i + k);     \
    }                                                                                  \
    return x;                                                                          \
  }
CHAIN_FN(0) CHAIN_FN(1) CHAIN_FN(2) CHAIN_FN(3) CHAIN_FN(4) CHAIN_FN(5) CHAIN_FN(6) CHAIN_FN(7)

__device__ __forceinline__ float call(int k, float x, float a, int fill = 0) {
  switch (k) {
    case 0: return chain0(x, a, fill);
    case 1: return chain1(x, a, fill);
    case 2: return chain2(x, a, fill);
    case 3: return chain3(x, a, fill);
    case 4: return chain4(x, a, fill);
    case 5: return chain5(x, a, fill);
    case 6: return chain6(x, a, fill);
    default: return chain7(x, a, fill);
  }
}

// out[block][k][0 or 1]: cycles of warp 0's first and second call of chain k.
__global__ void probe(float a, long long* out, float* sink, int mode, int fill) {
  const int warp = threadIdx.x / 32;
  float x = float(threadIdx.x);
  if (fill) {  // 8 x 8 KB of the chains' tails (other code), nothing timed
    for (int k = 0; k < kFuncs; ++k) x = call(k, x, a, 1);
    if (x == 12345.0f) sink[0] = x;
    return;
  }
  if (mode == 1 && warp == 1)
    for (int k = 0; k < kFuncs; ++k) x = call(k, x, a);
  __syncthreads();
  if (warp == 0) {
    for (int k = 0; k < kFuncs; ++k) {
      for (int pass = 0; pass < 2; ++pass) {
        long long t0 = clock64();
        asm volatile("" : "+f"(x)::"memory");
        x = call(k, x, a);
        asm volatile("" : "+f"(x)::"memory");
        long long t1 = clock64();
        if (threadIdx.x == 0) out[(blockIdx.x * kFuncs + k) * 2 + pass] = t1 - t0;
      }
    }
  }
  if (x == 12345.0f) sink[0] = x;
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = sms * kFuncs * 2;
  long long* out;
  float* sink;
  CK(cudaMalloc(&out, n * sizeof(long long)));
  CK(cudaMalloc(&sink, sizeof(float)));
  std::vector<long long> h(n);
  std::printf("ifetch_jump probe: cycles of a call of a 16-step dependent FMA chain (floor 64), %d blocks\n", sms);
  auto report = [&](const char* what) {
    CK(cudaMemcpy(h.data(), out, n * sizeof(long long), cudaMemcpyDeviceToHost));
    std::vector<long long> first, second;
    for (int b = 0; b < sms; ++b)
      for (int k = 0; k < kFuncs; ++k) {
        first.push_back(h[(b * kFuncs + k) * 2]);
        second.push_back(h[(b * kFuncs + k) * 2 + 1]);
      }
    auto pct = [](std::vector<long long> v, double q) {
      std::sort(v.begin(), v.end());
      return v[size_t(q * (v.size() - 1))];
    };
    std::printf("%-44s first call p10/p50/p90 %5lld %5lld %5lld   second call %5lld %5lld %5lld\n", what,
                pct(first, 0.1), pct(first, 0.5), pct(first, 0.9), pct(second, 0.1), pct(second, 0.5), pct(second, 0.9));
  };
  auto launch = [&](int mode, int rep, const char* what) {
    probe<<<sms, 64>>>(1.0001f, out, sink, mode, 0);
    CK(cudaGetLastError());
    char line[64];
    std::snprintf(line, sizeof(line), "launch %d, %s", rep, what);
    report(line);
  };
  for (int rep = 0; rep < 4; ++rep) launch(0, rep, "warp 0 alone");
  for (int rep = 0; rep < 2; ++rep) launch(1, rep, "warp 1 called them first");
  // Another kernel's code in between (a different module region): is the cache still warm?
  probe<<<sms, 64>>>(1.0001f, out, sink, 0, 1);
  probe<<<sms, 64>>>(1.0001f, out, sink, 0, 0);
  CK(cudaGetLastError());
  report("after a launch that ran 64 KB of other code");
  return 0;
}

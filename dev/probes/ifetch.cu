// Does code that runs once cost more than its instructions on this GPU (instruction fetch)? One warp
// runs a dependent chain of 2,048 FMAs three ways, timed with clock64 around each pass: straight-line
// (2,048 instructions, 32 KB of code), the same code a second time in the same launch, and a loop of
// 32 FMAs x 64 iterations; then straight-line code that another warp of the same SM sub-partition ran
// first (does warming the instruction cache from an idle warp help?). At 4 cycles per dependent FMA
// the floor is 8,192 cycles. docs/design/ (the fused GPU paths) records the results.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. dev/probes/ifetch.cu -o /tmp/ifetch && /tmp/ifetch
#include <cstdio>
#include <cstdlib>

#include "probe_support.cuh"  // CK

constexpr int kSteps = 2048;

__device__ __noinline__ float straight(float x, float a, float b) {
#pragma unroll
  for (int i = 0; i < kSteps; ++i) x = fmaf(x, a, b);
  return x;
}

__device__ __noinline__ float looped(float x, float a, float b) {
#pragma unroll 1
  for (int j = 0; j < kSteps / 32; ++j) {
#pragma unroll
    for (int i = 0; i < 32; ++i) x = fmaf(x, a, b);
  }
  return x;
}

// out[0..2]: cycles of straight (first pass), straight (second pass), looped, on warp 0;
// out[3]: straight on warp 0 after warp 4 (same sub-partition) ran it.
__global__ void probe(float a, float b, long long* out, float* sink, int mode) {
  const int warp = threadIdx.x / 32;
  float x = float(threadIdx.x);
  if (mode == 0) {
    if (warp != 0) return;
    // The empty asm ties each clock read to x, so the compiler cannot move a pass across it.
    long long t0 = clock64();
    asm volatile("" : "+f"(x)::"memory");
    x = straight(x, a, b);
    asm volatile("" : "+f"(x)::"memory");
    long long t1 = clock64();
    asm volatile("" : "+f"(x)::"memory");
    x = straight(x, a, b);
    asm volatile("" : "+f"(x)::"memory");
    long long t2 = clock64();
    asm volatile("" : "+f"(x)::"memory");
    x = looped(x, a, b);
    asm volatile("" : "+f"(x)::"memory");
    long long t3 = clock64();
    if (threadIdx.x == 0) { out[0] = t1 - t0; out[1] = t2 - t1; out[2] = t3 - t2; }
  } else {
    // warp 4 runs the code first; warp 0 waits at the barrier, then runs it.
    if (warp == 4) x = straight(x, a, b);
    __syncthreads();
    if (warp == 0) {
      long long t0 = clock64();
      asm volatile("" : "+f"(x)::"memory");
      x = straight(x, a, b);
      asm volatile("" : "+f"(x)::"memory");
      long long t1 = clock64();
      if (threadIdx.x == 0) out[3] = t1 - t0;
    }
  }
  if (x == 12345.0f) sink[0] = x;
}

int main() {
  long long* out;
  float* sink;
  CK(cudaMalloc(&out, 8 * sizeof(long long)));
  CK(cudaMalloc(&sink, sizeof(float)));
  long long h[8];
  std::printf("ifetch probe: cycles for a 2,048-step dependent FMA chain on one warp (floor 8,192)\n");
  for (int rep = 0; rep < 5; ++rep) {
    probe<<<1, 256>>>(1.0001f, 0.5f, out, sink, 0);
    probe<<<1, 256>>>(1.0001f, 0.5f, out, sink, 1);
    CK(cudaGetLastError());
    CK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
    std::printf("launch %d: straight first %lld, straight again %lld, loop %lld, straight after another warp %lld\n",
                rep, h[0], h[1], h[2], h[3]);
  }
  return 0;
}

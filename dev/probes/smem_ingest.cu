// How fast can one SM pull bytes from L2 into its shared memory (a design that streams LeNet-5's
// dense weights into one SM depends on it)? Each method moves B bytes of an L2-resident buffer
// (read once before, so no HBM) into one block's shared memory, timed with %globaltimer from the block's first instruction to the moment every
// byte has landed (the median of 20 launches, one block; then 132 blocks at once, each its own copy,
// for the aggregate):
//   tma1   one cp.async.bulk of B bytes by one thread (an mbarrier counts the bytes)
//   tma32  B / 32 KB bulk copies of 32 KB, all issued at once (a ring of 32 KB slots)
//   tma4   B / 4 KB bulk copies of 4 KB
//   cpasync  16-byte cp.async by 1,024 threads, then wait and a barrier
//   ldg    float4 loads by 1,024 threads into registers (4 in flight each), stored to shared memory
// docs/design/ (the fused GPU paths) records the results.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. dev/probes/smem_ingest.cu -o /tmp/ingest && /tmp/ingest
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_support.cuh"

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__global__ void __launch_bounds__(1024, 1) ingest(const float* __restrict__ src, int bytes, int method, int chunk,
                                                  unsigned long long* out, float* sink) {
  extern __shared__ __align__(128) float smem[];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned long long t0 = now_ns();
  const float* mine = src + size_t(blockIdx.x) * (bytes / 4);
  if (method <= 2) {
    if (threadIdx.x == 0) bulk_fill(smem, mine, bytes, chunk, &bar);
    __syncthreads();
  } else if (method == 3) {
    for (int i = threadIdx.x * 4; i < bytes / 4; i += blockDim.x * 4) __pipeline_memcpy_async(smem + i, mine + i, 16);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
  } else {
    const float4* s4 = reinterpret_cast<const float4*>(mine);
    float4* d4 = reinterpret_cast<float4*>(smem);
    const int n4 = bytes / 16;
    for (int i = threadIdx.x; i < n4; i += blockDim.x * 4) {
      float4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i + j * int(blockDim.x) < n4) v[j] = s4[i + j * blockDim.x];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i + j * int(blockDim.x) < n4) d4[i + j * blockDim.x] = v[j];
    }
    __syncthreads();
  }
  const unsigned long long t1 = now_ns();
  if (threadIdx.x == 0) {
    out[blockIdx.x] = t1 - t0;
    sink[blockIdx.x] = smem[(bytes / 4) - 1] + smem[blockIdx.x];
  }
}

int main() {
  const int max_bytes = 192 * 1024, blocks_max = 132;
  float* src = nullptr;
  float* sink = nullptr;
  unsigned long long* out = nullptr;
  CK(cudaMalloc(&src, size_t(max_bytes) * blocks_max));
  CK(cudaMemset(src, 0, size_t(max_bytes) * blocks_max));
  CK(cudaMalloc(&sink, blocks_max * sizeof(float)));
  CK(cudaMalloc(&out, blocks_max * sizeof(unsigned long long)));
  CK(cudaFuncSetAttribute(ingest, cudaFuncAttributeMaxDynamicSharedMemorySize, max_bytes));
  const char* names[] = {"tma1", "tma32", "tma4", "cpasync", "ldg"};
  const int chunks[] = {max_bytes, 32 * 1024, 4 * 1024, 0, 0};
  for (int blocks : {1, 132}) {
    for (int bytes : {4 * 1024, 16 * 1024, 64 * 1024, 192 * 1024}) {
      for (int m = 0; m < 5; ++m) {
        std::vector<unsigned long long> med;
        for (int rep = 0; rep < 21; ++rep) {
          ingest<<<blocks, 1024, max_bytes>>>(src, bytes, m, chunks[m], out, sink);
          CK(cudaGetLastError());
          std::vector<unsigned long long> h(blocks);
          CK(cudaMemcpy(h.data(), out, blocks * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
          if (rep > 0) med.push_back(*std::max_element(h.begin(), h.end()));  // the slowest block
        }
        std::sort(med.begin(), med.end());
        const double ns = double(med[med.size() / 2]);
        std::printf("blocks %3d  %6d B  %-8s  %8.0f ns  %7.1f GB/s per SM\n", blocks, bytes, names[m], ns,
                    double(bytes) / ns);
      }
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

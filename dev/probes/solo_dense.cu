// Why would a design with one image per SM (the dense weights streamed through a ring of
// shared-memory slots) run its dense layers slower per row than the image chain's clusters run the
// same loop? LeNet-5's f5: 120 units on 4 warps, dense_chain4 (engine/custom/fused/dense_steps.cuh,
// the product's loop) over unit-major chunks in shared memory. One block of 1,024 threads with
// ~200 KB of shared memory; warps 0-3 (one thread per unit) run dense_chain4 over 400 rows at a pitch
// of 404 floats, timed with clock64 by thread 0 (the median of 21 launches), in these settings:
//   parked   the other 28 warps wait at a named barrier (the one-image-per-SM design's dense part)
//   exited   the other warps return at once
//   spin     warp 31's lane 0 polls an mbarrier that never completes (the producer's wait) meanwhile
//   tma      the weights land by one bulk copy just before (the ring)
//   consts   dense_chain4 once per chunk of 68 rows, the bounds and pitch read from the kernel
//            parameters (indexed constant loads)
//   runtime  the 400 rows as a kernel argument (a trip count unknown to the compiler, as in the kernels)
//   15units  15 units on one warp (a cluster block's share of f5), the rest parked
//   deep     dense_chain4_deep (16 steps in flight), rows as a kernel argument
//   pitchprm the pitch read from the parameters (indexed), rows as a kernel argument, one call
// Rows cost = cycles / 400; floor: 4 cycles a row (the dependent FMA). docs/design/ (the fused GPU
// paths) records the results.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. dev/probes/solo_dense.cu -o /tmp/solo_dense && /tmp/solo_dense
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/custom/fused/dense_steps.cuh"
#include "probe_support.cuh"

using engine::custom::fused::dense_chain4;
using engine::custom::fused::dense_chain4_deep;

constexpr int kUnits = 120, kRows = 400, kPitch = 404;  // 404 / 4 = 101: odd
struct Params {
  int rows[16];
  int pitch[16];
};

__global__ void __launch_bounds__(1024, 1) probe(const __grid_constant__ Params prm, const float* __restrict__ w_global,
                                                 int mode, int layer, int rows_arg, long long* out, float* sink) {
  extern __shared__ __align__(128) float smem[];
  __shared__ __align__(8) unsigned long long bar, never;
  float* a = smem;             // 400 activations
  float* w = smem + 512;       // 120 units x 404
  const int tid = threadIdx.x, warp = tid / 32;
  for (int i = tid; i < kRows; i += blockDim.x) a[i] = 0.001f * float(i % 17);
  if (mode != 3) {
    for (int i = tid; i < kUnits * kPitch; i += blockDim.x) w[i] = w_global[i];
  } else if (tid == 0) {
    bulk_fill(w, w_global, kUnits * kPitch * 4, kUnits * kPitch * 4, &bar);
  }
  if (tid == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&never)) : "memory");
  __syncthreads();
  if (warp >= 4) {
    if (mode == 1) return;
    if (mode == 2 && tid == 992) {
      for (int polls = 0; polls < 20000; ++polls)
        if (phase0_done(&never) || *static_cast<volatile float*>(sink) == 1.0f) break;
    }
    asm volatile("bar.sync 1, 1024;" ::: "memory");
    return;
  }
  const long long t0 = clock64();
  float s = 0.0f;
  if (tid < (mode == 6 ? 15 : kUnits)) {
    if (mode == 4) {  // bounds and pitch from the parameters, indexed by a run-time layer
      const int rows = prm.rows[layer], pitch = prm.pitch[layer];
      for (int r0 = 0; r0 < kRows; r0 += rows) s = dense_chain4(a + r0, w + tid * pitch + r0, min(rows, kRows - r0), s);
    } else if (mode == 5) {
      s = dense_chain4(a, w + tid * kPitch, rows_arg, s);
    } else if (mode == 7) {
      s = dense_chain4_deep(a, w + tid * kPitch, rows_arg, s);
    } else if (mode == 8) {
      s = dense_chain4(a, w + tid * prm.pitch[layer], rows_arg, s);
    } else {
      s = dense_chain4(a, w + tid * kPitch, kRows, s);
    }
  }
  __syncwarp();
  const long long t1 = clock64();
  if (tid == 0) out[0] = t1 - t0;
  if (tid < kUnits) sink[tid] = s;
  if (mode != 1) asm volatile("bar.sync 1, 1024;" ::: "memory");
}

int main() {
  float *w = nullptr, *sink = nullptr;
  long long* out = nullptr;
  std::vector<float> host(size_t(kUnits) * kPitch);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.01f * float(i % 13);
  CK(cudaMalloc(&w, host.size() * 4));
  CK(cudaMemcpy(w, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&sink, 1024 * sizeof(float)));
  CK(cudaMemset(sink, 0, 1024 * sizeof(float)));
  CK(cudaMalloc(&out, sizeof(long long)));
  const int smem = (512 + kUnits * kPitch) * 4;
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  Params prm{};
  for (int i = 0; i < 16; ++i) {
    prm.rows[i] = 68;
    prm.pitch[i] = kPitch;
  }
  const char* names[] = {"parked", "exited", "spin", "tma", "consts", "runtime", "15units", "deep", "pitchprm"};
  for (int threads : {1024, 128}) {
    for (int m = 0; m < 9; ++m) {
      if (threads == 128 && m != 1) continue;
      std::vector<long long> v;
      for (int rep = 0; rep < 21; ++rep) {
        probe<<<1, threads, smem>>>(prm, w, m, rep % 3, kRows, out, sink);
        CK(cudaGetLastError());
        long long c = 0;
        CK(cudaMemcpy(&c, out, sizeof(c), cudaMemcpyDeviceToHost));
        v.push_back(c);
      }
      std::sort(v.begin(), v.end());
      std::printf("threads %4d  %-7s  %7lld cycles  %5.1f cycles a row\n", threads, names[m], v[v.size() / 2],
                  double(v[v.size() / 2]) / kRows);
    }
  }
  return 0;
}

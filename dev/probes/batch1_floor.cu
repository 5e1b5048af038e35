// What a batch-1 forward cannot go below on this GPU: the cost of the pieces the image chain is made
// of, each timed the way `engine bench --batch 1 --cuda-graph` times a forward (event, one CUDA-graph
// launch, event, synchronize; median of many). docs/design/ (the fused GPU paths) records the results.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. dev/probes/batch1_floor.cu -o /tmp/batch1_floor && /tmp/batch1_floor
#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#include "probe_support.cuh"  // CK

__global__ void empty_kernel() {}

// A kernel whose parameter block is as large as the image chain's (ImageChainParams: 4.4 KB): does
// the launch pay for the bytes it carries?
struct BigParams {
  int v[1100];
};
__global__ void big_param_kernel(const __grid_constant__ BigParams p, float* sink) {
  if (p.v[threadIdx.x % 1100] == 12345 && blockIdx.x == 0) sink[0] = 1.0f;
}
template <int kBytes>
struct Params {
  int v[kBytes / 4];
};
template <int kBytes>
__global__ void sized_param_kernel(const __grid_constant__ Params<kBytes> p, float* sink) {
  if (p.v[0] == 12345 && blockIdx.x == 0) sink[0] = 1.0f;
}

// `barriers` team barriers (cluster-wide when launched with clusters, else the block's).
template <bool kCluster>
__global__ void barrier_kernel(int barriers, float* sink) {
  extern __shared__ float smem[];
  for (int i = 0; i < barriers; ++i) {
    if constexpr (kCluster) cg::this_cluster().sync();
    else __syncthreads();
  }
  if (threadIdx.x == 0 && blockIdx.x == 0 && barriers < 0) sink[0] = smem[0];
}

// The image chain's prologue: 784 input floats from global memory and `weight_floats` of conv weights
// by cp.async, then one barrier.
__global__ void load_kernel(const float* x, const float* w, int weight_floats, float* sink) {
  extern __shared__ __align__(16) float smem[];
  for (int i = threadIdx.x * 4; i < weight_floats; i += blockDim.x * 4) __pipeline_memcpy_async(smem + i, w + i, 16);
  __pipeline_commit();
  for (int i = threadIdx.x; i < 784; i += blockDim.x) smem[weight_floats + i] = x[i];
  __pipeline_wait_prior(0);
  __syncthreads();
  if (threadIdx.x == 0 && smem[weight_floats] == 12345.f) sink[0] = smem[0];
}

// One thread: `steps` dependent FMAs whose operands come from shared memory (the shape of a dense
// unit's chain: f5 is 400 steps).
__global__ void chain_kernel(int steps, float* sink) {
  __shared__ float a[512], w[512];
  for (int i = threadIdx.x; i < 512; i += blockDim.x) {
    a[i] = 1e-3f * i;
    w[i] = 1e-3f * (511 - i);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float s = 0;
#pragma unroll 8
  for (int r = 0; r < steps; ++r) s = fmaf(a[r & 511], w[r & 511], s);
  sink[0] = s;
}

// The 400-step chain of thread 0 while the block's other warps wait for it: at a block barrier
// (mode 0), polling an mbarrier with try_wait (mode 1, what the image chain's hand-offs do), or
// try_wait with a suspend-time hint (mode 2). Does the polling slow the working warp?
__global__ void chain_beside_waiters(int steps, int mode, float* sink) {
  __shared__ float a[512], w[512];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned b = unsigned(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
  }
  for (int i = threadIdx.x; i < 512; i += blockDim.x) {
    a[i] = 1e-3f * i;
    w[i] = 1e-3f * (511 - i);
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      float s = 0;
#pragma unroll 8
      for (int r = 0; r < steps; ++r) s = fmaf(a[r & 511], w[r & 511], s);
      sink[0] = s;
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
    }
    __syncwarp();
  } else if (mode == 1) {
    for (;;) {
      unsigned done;
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(b), "r"(0u) : "memory");
      if (done) break;
    }
  } else if (mode == 2) {
    for (;;) {
      unsigned done;
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(b), "r"(0u), "r"(1000000u) : "memory");
      if (done) break;
    }
  }
  __syncthreads();
}

struct Case {
  const char* name;
  cudaGraphExec_t exec;
  void (*plain)(cudaStream_t) = nullptr;  // set: timed as a plain launch instead (event, launch, event)
};

template <class Enqueue>
cudaGraphExec_t capture(cudaStream_t s, Enqueue&& enqueue) {
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue();
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));
  CK(cudaGraphDestroy(g));
  return e;
}

void launch_cluster(void (*k)(int, float*), int cluster, int threads, int smem, cudaStream_t s, int arg, float* sink) {
  cudaLaunchConfig_t c = {};
  cudaLaunchAttribute a[1];
  a[0].id = cudaLaunchAttributeClusterDimension;
  a[0].val.clusterDim.x = unsigned(cluster);
  a[0].val.clusterDim.y = a[0].val.clusterDim.z = 1;
  c.gridDim = dim3(unsigned(cluster));
  c.blockDim = dim3(unsigned(threads));
  c.dynamicSmemBytes = size_t(smem);
  c.stream = s;
  c.attrs = a;
  c.numAttrs = 1;
  CK(cudaLaunchKernelEx(&c, k, arg, sink));
}

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *sink, *x, *w;
  CK(cudaMalloc(&sink, 4096));
  CK(cudaMalloc(&x, 784 * 4));
  CK(cudaMalloc(&w, 1 << 20));
  CK(cudaMemset(x, 0, 784 * 4));
  CK(cudaMemset(w, 0, 1 << 20));
  const int smem = 87 * 1024;  // the image chain's dynamic shared memory (87.2 KB for LeNet-5)
  CK(cudaFuncSetAttribute(barrier_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(barrier_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(load_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));

  std::vector<Case> cases;
  cases.push_back({"empty kernel, 1 x 32 threads", capture(s, [&] { empty_kernel<<<1, 32, 0, s>>>(); })});
  cases.push_back({"empty kernel, 8 x 512 threads, 87 KB smem",
                   capture(s, [&] { barrier_kernel<false><<<8, 512, smem, s>>>(0, sink); })});
  cases.push_back({"cluster of 8 x 512, 87 KB, 0 cluster barriers",
                   capture(s, [&] { launch_cluster(barrier_kernel<true>, 8, 512, smem, s, 0, sink); })});
  cases.push_back({"cluster of 8 x 512, 87 KB, 10 cluster barriers",
                   capture(s, [&] { launch_cluster(barrier_kernel<true>, 8, 512, smem, s, 10, sink); })});
  cases.push_back({"cluster of 8 x 512, 87 KB, 100 cluster barriers",
                   capture(s, [&] { launch_cluster(barrier_kernel<true>, 8, 512, smem, s, 100, sink); })});
  cases.push_back({"1 x 512, 87 KB, 100 block barriers",
                   capture(s, [&] { barrier_kernel<false><<<1, 512, smem, s>>>(100, sink); })});
  cases.push_back({"1 x 512: input 784 floats + 10 KB weights (cp.async), 1 barrier",
                   capture(s, [&] { load_kernel<<<1, 512, smem, s>>>(x, w, 2560, sink); })});
  cases.push_back({"1 x 512: input + 80 KB (cp.async), 1 barrier",
                   capture(s, [&] { load_kernel<<<1, 512, smem, s>>>(x, w, 20480, sink); })});
  for (int steps : {0, 400, 800, 1600})
    cases.push_back({steps == 0 ? "1 x 128: smem fill, 0-step chain"
                     : steps == 400 ? "1 x 128: 400-step FMA chain from smem"
                     : steps == 800 ? "1 x 128: 800-step chain" : "1 x 128: 1600-step chain",
                     capture(s, [&] { chain_kernel<<<1, 128, 0, s>>>(steps, sink); })});
  for (int mode : {0, 1, 2})
    cases.push_back({mode == 0 ? "1 x 512: 400-step chain, 15 warps at a block barrier"
                     : mode == 1 ? "1 x 512: 400-step chain, 15 warps polling an mbarrier (try_wait)"
                                 : "1 x 512: 400-step chain, 15 warps in try_wait with a suspend hint",
                     capture(s, [&] { chain_beside_waiters<<<1, 512, 0, s>>>(400, mode, sink); })});
  cases.push_back({"two empty kernels in one graph", capture(s, [&] {
                     empty_kernel<<<1, 32, 0, s>>>();
                     empty_kernel<<<1, 32, 0, s>>>();
                   })});

  static BigParams big{};
  static float* big_sink = sink;
  cases.push_back({"1 x 32, 4.4 KB __grid_constant__ parameters",
                   capture(s, [&] { big_param_kernel<<<1, 32, 0, s>>>(big, sink); })});
  cases.push_back({"1 x 32, 8 B of parameters (plain sized kernel)",
                   capture(s, [&] { sized_param_kernel<8><<<1, 32, 0, s>>>(Params<8>{}, sink); })});
  cases.push_back({"1 x 32, 1 KB of parameters",
                   capture(s, [&] { sized_param_kernel<1024><<<1, 32, 0, s>>>(Params<1024>{}, sink); })});
  cases.push_back({"1 x 32, 16 KB of parameters",
                   capture(s, [&] { sized_param_kernel<16384><<<1, 32, 0, s>>>(Params<16384>{}, sink); })});
  cases.push_back({"plain launch (no graph): empty kernel 1 x 32", nullptr,
                   [](cudaStream_t st) { empty_kernel<<<1, 32, 0, st>>>(); }});
  cases.push_back({"plain launch (no graph): 1 x 32, 4.4 KB parameters", nullptr,
                   [](cudaStream_t st) { big_param_kernel<<<1, 32, 0, st>>>(big, big_sink); }});

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::printf("%-66s %9s %9s %9s\n", "case (event, graph launch, event; 3000 runs)", "p10 us", "median", "p90");
  for (auto& c : cases) {
    std::vector<float> t;
    for (int i = 0; i < 3200; ++i) {
      CK(cudaEventRecord(e0, s));
      if (c.plain) c.plain(s);
      else CK(cudaGraphLaunch(c.exec, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 200) t.push_back(ms * 1e3f);
    }
    std::sort(t.begin(), t.end());
    std::printf("%-66s %9.2f %9.2f %9.2f\n", c.name, t[t.size() / 10], t[t.size() / 2], t[t.size() * 9 / 10]);
  }
  return 0;
}

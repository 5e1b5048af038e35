// How much of batch 1's forward is the launch, and does the kernel's parameter size change it?
// The image chain's parameters (ImageChainParams) are several KB, past the 4,096 bytes kernel
// parameters were limited to before CUDA 12.1. This probe launches a kernel that does almost nothing, with parameters of 256 B to 8 KB, the way `engine
// bench --cuda-graph` times a forward (event, launch, event, wait; median of many), in the image
// chain's shape (clusters of 8 blocks of 512 threads, 150 KiB of dynamic shared memory) and
// plainly (one block), as a plain launch and as a one-node CUDA graph.
// docs/design/ (the fused GPU paths) records the results.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. dev/probes/launch_params.cu -o /tmp/launch_params && /tmp/launch_params
#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_support.cuh"

template <int kBytes>
struct Params {
  int v[kBytes / 4];
};

// Block 0's thread 0 reads the first and the last word (the constant bank is really loaded) and
// writes their sum: the launch, the clusters' scheduling and one store, nothing else.
template <int kBytes>
__global__ void __launch_bounds__(512, 1) touch(const __grid_constant__ Params<kBytes> p, int* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *out = p.v[0] + p.v[kBytes / 4 - 1];
}

struct Shape {
  const char* name;
  int blocks, threads, cluster, smem;
};

template <int kBytes>
double median_us(const Shape& s, bool graph, int* out, cudaStream_t stream) {
  auto* fn = touch<kBytes>;
  CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, s.smem));
  Params<kBytes> p{};
  p.v[0] = 1;
  p.v[kBytes / 4 - 1] = 2;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(s.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(s.blocks));
  config.blockDim = dim3(unsigned(s.threads));
  config.dynamicSmemBytes = size_t(s.smem);
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = s.cluster > 1 ? 1 : 0;
  auto launch = [&] { CK(cudaLaunchKernelEx(&config, fn, p, out)); };
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch();
    CK(cudaStreamEndCapture(stream, &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphDestroy(g));
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 6000; ++i) {
    CK(cudaEventRecord(e0, stream));
    if (graph) CK(cudaGraphLaunch(exec, stream));
    else launch();
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 1000) ms.push_back(t);  // the first thousand warm up
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  if (exec) CK(cudaGraphExecDestroy(exec));
  return 1e3 * ms[ms.size() / 2];
}

template <int kBytes>
void row(const Shape& s, int* out, cudaStream_t stream) {
  const double plain = median_us<kBytes>(s, false, out, stream);
  const double graph = median_us<kBytes>(s, true, out, stream);
  std::printf("%-22s params %5d B   plain %6.2f us   graph %6.2f us\n", s.name, kBytes, plain, graph);
}

int main() {
  int* out = nullptr;
  CK(cudaMalloc(&out, sizeof(int)));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Shape shapes[] = {{"cluster 8 x 512, 150K", 8, 512, 8, 150 * 1024}, {"1 block x 32", 1, 32, 1, 0}};
  for (int round = 0; round < 2; ++round)
    for (const Shape& s : shapes) {
      row<256>(s, out, stream);
      row<2048>(s, out, stream);
      row<4000>(s, out, stream);
      row<4680>(s, out, stream);
      row<8192>(s, out, stream);
    }
  CK(cudaFree(out));
  return 0;
}

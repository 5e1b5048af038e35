// The tiled GEMM of the dense layers' training (fp32, --fmad=false: products rounded before each
// add, as host_ops.hpp). 16x16 output tiles, k in tiles of 16 through shared memory; each thread
// keeps one output's sum and adds its k terms in ascending order.
#include "engine/custom/train/dense_train.hpp"
#include "engine/custom/train/train_launch.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::train {
namespace {

constexpr int kTile = 16;

__global__ void gemm_kernel(GemmArgs g) {
  __shared__ float as[kTile][kTile + 1];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  const bool inside = row < g.m && col < g.n;
  float acc = 0.0f;
  if (inside) acc = g.accumulate ? g.c[row * g.ldc + col] : (g.bias ? g.bias[col] : 0.0f);
  for (int k0 = 0; k0 < g.k; k0 += kTile) {
    const int ar = blockIdx.y * kTile + ty, ak = k0 + tx;
    as[ty][tx] = ar < g.m && ak < g.k ? g.a[ar * g.a_m + ak * g.a_k] : 0.0f;
    const int bk = k0 + ty, bc = blockIdx.x * kTile + tx;
    bs[ty][tx] = bk < g.k && bc < g.n ? g.b[bk * g.b_k + bc * g.b_n] : 0.0f;
    __syncthreads();
    const int kend = min(kTile, g.k - k0);  // no padding terms: the sum has exactly k terms
    for (int kk = 0; kk < kend; ++kk) acc = acc + as[ty][kk] * bs[kk][tx];
    __syncthreads();
  }
  if (inside) g.c[row * g.ldc + col] = acc;
}

__global__ void bias_gradient_kernel(const float* __restrict__ dy, float* __restrict__ db, int n, int units) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= units) return;
  float acc = 0.0f;
  for (int s = 0; s < n; ++s) acc = acc + dy[(long long)s * units + u];
  db[u] = acc;
}

}  // namespace

void gemm(const GemmArgs& args, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return;
  const dim3 block(kTile, kTile);
  const dim3 grid(unsigned((args.n + kTile - 1) / kTile), unsigned((args.m + kTile - 1) / kTile));
  gemm_kernel<<<grid, block, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH("train: dense GEMM");
}

void bias_gradient(const float* dy, float* db, int n, int units, cudaStream_t stream) {
  bias_gradient_kernel<<<unsigned((units + 127) / 128), 128, 0, stream>>>(dy, db, n, units);
  CUDA_CHECK_LAUNCH("train: dense bias gradient");
}

}  // namespace engine::custom::train

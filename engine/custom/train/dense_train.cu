// The tiled GEMM of the dense layers' training (fp32, --fmad=false: products rounded before each
// add, as host_ops.hpp). 16x16 output tiles, k in tiles of 16 through shared memory; each thread
// keeps one output's sum and adds its k terms in ascending order.
#include "engine/gpu/train/activation.cuh"
#include "engine/custom/train/dense_train.hpp"
#include "engine/gpu/train/train_launch.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::train {

using namespace gpu::train;  // the GPU trainers' shared part
namespace {

constexpr int kTile = 16;

__global__ void gemm_kernel(GemmArgs g) {
  __shared__ float as[kTile][kTile + 1];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  const int cols = g.row_sums ? g.n + 1 : g.n;  // the extra column of ones (GemmArgs::row_sums)
  const bool inside = row < g.m && col < cols;
  float acc = 0.0f;
  if (inside && col < g.n) acc = g.accumulate ? g.c[row * g.ldc + col] : (g.bias ? g.bias[col] : 0.0f);
  for (int k0 = 0; k0 < g.k; k0 += kTile) {
    const int ar = blockIdx.y * kTile + ty, ak = k0 + tx;
    float av = 0.0f;
    if (ar < g.m && ak < g.k) {
      const long long at = ar * g.a_m + ak * g.a_k;
      av = g.a_act >= 0 ? activation_grad(g.a_act, g.a[at], g.a_act_y[at]) : g.a[at];
    }
    as[ty][tx] = av;
    const int bk = k0 + ty, bc = blockIdx.x * kTile + tx;
    bs[ty][tx] = bk < g.k && bc < g.n ? g.b[bk * g.b_k + bc * g.b_n] : bk < g.k && bc == g.n && g.row_sums ? 1.0f : 0.0f;
    __syncthreads();
    const int kend = min(kTile, g.k - k0);  // no padding terms: the sum has exactly k terms
    for (int kk = 0; kk < kend; ++kk) acc = acc + as[ty][kk] * bs[kk][tx];
    __syncthreads();
  }
  if (inside) {
    if (col < g.n) g.c[row * g.ldc + col] = activate(g.epilogue_act, acc);
    else g.row_sums[row] = acc;  // col == n: only with row_sums
  }
}

}  // namespace

void gemm(const GemmArgs& args, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return;
  const dim3 block(kTile, kTile);
  const int cols = args.row_sums ? args.n + 1 : args.n;
  const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((args.m + kTile - 1) / kTile));
  gemm_kernel<<<grid, block, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH("train: dense GEMM");
}

}  // namespace engine::custom::train

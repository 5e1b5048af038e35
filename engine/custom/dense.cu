#include "engine/custom/dense.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "engine/custom/device_math.cuh"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

constexpr int kThreadsSide = 16;  // 16 x 16 threads per block
constexpr int kBK = 16;           // K step

template <int TM, int TN>
__global__ void __launch_bounds__(kThreadsSide* kThreadsSide)
    dense_forward_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                         float* __restrict__ y, int n, int K, int U, Activation act) {
  constexpr int BM = kThreadsSide * TM, BN = kThreadsSide * TN;
  constexpr int kThreads = kThreadsSide * kThreadsSide;
  static_assert((BM * kBK) % kThreads == 0 && (BN * kBK) % kThreads == 0, "tile loads must divide evenly");
  __shared__ float xs[kBK][BM + 1];  // xs[k][row]: transposed, +1 against bank conflicts on store
  __shared__ float ws[kBK][BN + 1];  // ws[k][unit]

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kThreadsSide + tx;
  const int tiles_m = (n + BM - 1) / BM, tiles_n = (U + BN - 1) / BN;

  // Loop bounds depend on blockIdx only: every thread reaches every __syncthreads.
  for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    for (int tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
      const int m0 = tm * BM, n0 = tn * BN;
      // Thread (tx, ty) owns rows m0 + ty + 16 i and columns n0 + tx + 16 j: a warp's stores of
      // one (i, j) are 16 consecutive floats of two rows.
      double acc[TM][TN];
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int col = n0 + tx + kThreadsSide * j;
        const double b0 = (bias != nullptr && col < U) ? double(bias[col]) : 0.0;
#pragma unroll
        for (int i = 0; i < TM; ++i) acc[i][j] = b0;
      }

      for (int k0 = 0; k0 < K; k0 += kBK) {
        __syncthreads();  // the previous tiles are no longer being read
#pragma unroll
        for (int l = 0; l < BM * kBK / kThreads; ++l) {
          const int e = tid + l * kThreads;
          const int r = e / kBK, kk = e % kBK;  // 16 consecutive threads read 16 consecutive k
          const int row = m0 + r, k = k0 + kk;
          xs[kk][r] = (row < n && k < K) ? x[int64_t(row) * K + k] : 0.0f;
        }
#pragma unroll
        for (int l = 0; l < BN * kBK / kThreads; ++l) {
          const int e = tid + l * kThreads;
          const int r = e / kBK, kk = e % kBK;
          const int col = n0 + r, k = k0 + kk;
          ws[kk][r] = (col < U && k < K) ? w[int64_t(col) * K + k] : 0.0f;
        }
        __syncthreads();
        // Past K the staged values are zeros: acc + 0 * 0 leaves every accumulator unchanged.
        const int kmax = min(kBK, K - k0);
        for (int kk = 0; kk < kmax; ++kk) {
          double a[TM], b[TN];
#pragma unroll
          for (int i = 0; i < TM; ++i) a[i] = double(xs[kk][ty + kThreadsSide * i]);
#pragma unroll
          for (int j = 0; j < TN; ++j) b[j] = double(ws[kk][tx + kThreadsSide * j]);
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
      }

#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int row = m0 + ty + kThreadsSide * i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int col = n0 + tx + kThreadsSide * j;
          if (row < n && col < U) y[int64_t(row) * U + col] = apply_activation(float(acc[i][j]), act);
        }
      }
    }
  }
}

int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

}  // namespace

DenseLaunch dense_plan(int /*in_features*/, int units, int max_batch, const DeviceLimits& limits) {
  DenseLaunch l;
  const int64_t want_blocks = int64_t(std::max(limits.multiprocessors, 1));
  for (int micro : {4, 2}) {
    const int t = 16 * micro;
    if (int64_t(ceil_div(max_batch, t)) * ceil_div(units, t) >= want_blocks) {
      l.micro = micro;
      return l;
    }
  }
  l.micro = 1;
  return l;
}

void dense_forward(const DenseArgs& a, const DenseLaunch& l, int n, cudaStream_t stream, const std::string& context) {
  if (n <= 0) return;
  const int t = l.tile();
  const dim3 block(kThreadsSide, kThreadsSide);
  const dim3 grid(unsigned(std::min(ceil_div(a.units, t), INT_MAX)), unsigned(std::min(ceil_div(n, t), 65535)));
  switch (l.micro) {
    case 4:
      dense_forward_kernel<4, 4><<<grid, block, 0, stream>>>(a.x, a.weight, a.bias, a.y, n, a.in_features, a.units,
                                                             a.activation);
      break;
    case 2:
      dense_forward_kernel<2, 2><<<grid, block, 0, stream>>>(a.x, a.weight, a.bias, a.y, n, a.in_features, a.units,
                                                             a.activation);
      break;
    default:
      dense_forward_kernel<1, 1><<<grid, block, 0, stream>>>(a.x, a.weight, a.bias, a.y, n, a.in_features, a.units,
                                                             a.activation);
      break;
  }
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom

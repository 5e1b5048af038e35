#include "engine/custom/matrix_ops.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

__device__ __forceinline__ int64_t linear_block() {
  return blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
}
__device__ __forceinline__ int64_t block_count() { return int64_t(gridDim.x) * gridDim.y * gridDim.z; }
__device__ __forceinline__ int linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
__device__ __forceinline__ int thread_count() { return blockDim.x * blockDim.y * blockDim.z; }

// Rows over blocks, columns over threads.
__global__ void matrix_add_naive_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                        float* __restrict__ c, int rows, int cols) {
  for (int64_t r = linear_block(); r < rows; r += block_count())
    for (int col = linear_thread(); col < cols; col += thread_count()) {
      const int64_t i = r * cols + col;
      c[i] = a[i] + b[i];
    }
}

__global__ void matrix_multiply_naive_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int m, int k, int n) {
  for (int64_t r = linear_block(); r < m; r += block_count())
    for (int col = linear_thread(); col < n; col += thread_count()) {
      float acc = 0.0f;
      for (int p = 0; p < k; ++p) acc = fmaf(a[r * k + p], b[int64_t(p) * n + col], acc);
      c[r * n + col] = acc;
    }
}

// A 32 x 32 tile of a and b goes through shared memory (the seed's tiled add: no reuse, so no gain
// is expected; it is here to be measured). Block 32 x 8: each thread moves 4 rows of the tile.
__global__ void matrix_add_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                        float* __restrict__ c, int rows, int cols) {
  __shared__ float as[kMatrixAddTile][kMatrixAddTile + 1];
  __shared__ float bs[kMatrixAddTile][kMatrixAddTile + 1];
  const int tiles_r = (rows + kMatrixAddTile - 1) / kMatrixAddTile;
  const int tiles_c = (cols + kMatrixAddTile - 1) / kMatrixAddTile;
  for (int tr = blockIdx.y; tr < tiles_r; tr += gridDim.y)
    for (int tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
      const int col = tc * kMatrixAddTile + threadIdx.x;
      __syncthreads();  // previous tile fully consumed
      for (int dy = threadIdx.y; dy < kMatrixAddTile; dy += kMatrixAddTileRows) {
        const int row = tr * kMatrixAddTile + dy;
        const bool inside = row < rows && col < cols;
        as[dy][threadIdx.x] = inside ? a[int64_t(row) * cols + col] : 0.0f;
        bs[dy][threadIdx.x] = inside ? b[int64_t(row) * cols + col] : 0.0f;
      }
      __syncthreads();
      for (int dy = threadIdx.y; dy < kMatrixAddTile; dy += kMatrixAddTileRows) {
        const int row = tr * kMatrixAddTile + dy;
        if (row < rows && col < cols) c[int64_t(row) * cols + col] = as[dy][threadIdx.x] + bs[dy][threadIdx.x];
      }
    }
}

// Classic shared-memory tiling: thread (tx, ty) computes c[row = tile row + ty][col = tile col + tx].
__global__ void matrix_multiply_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int m, int k, int n) {
  __shared__ float as[kMatrixTile][kMatrixTile + 1];
  __shared__ float bs[kMatrixTile][kMatrixTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tiles_r = (m + kMatrixTile - 1) / kMatrixTile;
  const int tiles_c = (n + kMatrixTile - 1) / kMatrixTile;
  for (int tr = blockIdx.y; tr < tiles_r; tr += gridDim.y)
    for (int tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
      const int row = tr * kMatrixTile + ty, col = tc * kMatrixTile + tx;
      float acc = 0.0f;
      for (int p0 = 0; p0 < k; p0 += kMatrixTile) {
        __syncthreads();
        as[ty][tx] = (row < m && p0 + tx < k) ? a[int64_t(row) * k + p0 + tx] : 0.0f;
        bs[ty][tx] = (p0 + ty < k && col < n) ? b[int64_t(p0 + ty) * n + col] : 0.0f;
        __syncthreads();
        const int pmax = min(kMatrixTile, k - p0);
        for (int p = 0; p < pmax; ++p) acc = fmaf(as[ty][p], bs[p][tx], acc);
      }
      if (row < m && col < n) c[int64_t(row) * n + col] = acc;
    }
}

unsigned clamp_grid(int64_t v, int64_t limit) { return unsigned(std::clamp<int64_t>(v, 1, limit)); }

}  // namespace

dim3 matrix_add_tiled_grid(int rows, int cols) {
  return dim3(clamp_grid((int64_t(cols) + kMatrixAddTile - 1) / kMatrixAddTile, INT_MAX),
              clamp_grid((int64_t(rows) + kMatrixAddTile - 1) / kMatrixAddTile, 65535));
}

dim3 matrix_multiply_tiled_grid(int m, int n) {
  return dim3(clamp_grid((int64_t(n) + kMatrixTile - 1) / kMatrixTile, INT_MAX),
              clamp_grid((int64_t(m) + kMatrixTile - 1) / kMatrixTile, 65535));
}

void matrix_add_naive(const float* a, const float* b, float* c, int rows, int cols, dim3 grid, dim3 block,
                      cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  matrix_add_naive_kernel<<<grid, block, 0, stream>>>(a, b, c, rows, cols);
  CUDA_CHECK_LAUNCH("matrix_add_naive");
}

void matrix_add_tiled(const float* a, const float* b, float* c, int rows, int cols, cudaStream_t stream, dim3 grid) {
  if (rows <= 0 || cols <= 0) return;
  if (grid.x == 0 || grid.y == 0) grid = matrix_add_tiled_grid(rows, cols);
  grid.z = 1;
  matrix_add_tiled_kernel<<<grid, dim3(kMatrixAddTile, kMatrixAddTileRows), 0, stream>>>(a, b, c, rows, cols);
  CUDA_CHECK_LAUNCH("matrix_add_tiled");
}

void matrix_multiply_naive(const float* a, const float* b, float* c, int m, int k, int n, dim3 grid, dim3 block,
                           cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  matrix_multiply_naive_kernel<<<grid, block, 0, stream>>>(a, b, c, m, k, n);
  CUDA_CHECK_LAUNCH("matrix_multiply_naive");
}

void matrix_multiply_tiled(const float* a, const float* b, float* c, int m, int k, int n, cudaStream_t stream,
                           dim3 grid) {
  if (m <= 0 || n <= 0) return;
  if (grid.x == 0 || grid.y == 0) grid = matrix_multiply_tiled_grid(m, n);
  grid.z = 1;
  matrix_multiply_tiled_kernel<<<grid, dim3(kMatrixTile, kMatrixTile), 0, stream>>>(a, b, c, m, k, n);
  CUDA_CHECK_LAUNCH("matrix_multiply_tiled");
}

}  // namespace engine::custom

#pragma once
// The seed's Part 1 operations as reusable kernels, for benchmarks that sweep launch shapes.
// All matrices are float32, row-major, on the device; every launcher is asynchronous on `stream`
// and checks the launch (a shape the device rejects throws engine::gpu::CudaError).
//
// Naive kernels: one thread per output element, rows spread over blocks and columns over threads
// of a block. The launch shape is the caller's: each block walks rows blockId, blockId + blocks,
// ... and each thread columns threadId, threadId + threads, ... (blockId / threadId are the linear
// indices over all three dimensions), so any grid and block, gridDim = 1 included, computes the
// whole result.
//
// Tiled kernels: square kMatrixTile x kMatrixTile tiles staged in shared memory; the default grid
// covers the output once, a smaller `grid` loops over the tiles (grid-stride in both dimensions).
#include <cuda_runtime_api.h>

namespace engine::custom {

inline constexpr int kMatrixTile = 16;          // multiply: 16 x 16 threads, one output each
inline constexpr int kMatrixAddTile = 32;       // add: 32 x 32 tile, 32 x 8 threads
inline constexpr int kMatrixAddTileRows = 8;

// c = a + b; all [rows, cols].
void matrix_add_naive(const float* a, const float* b, float* c, int rows, int cols, dim3 grid, dim3 block,
                      cudaStream_t stream);
// Same through shared-memory tiles (block is kMatrixAddTile x kMatrixAddTileRows threads).
// grid.x/grid.y = 0 picks the covering grid.
void matrix_add_tiled(const float* a, const float* b, float* c, int rows, int cols, cudaStream_t stream,
                      dim3 grid = dim3(0, 0, 1));

// c = a * b with a [m, k], b [k, n], c [m, n]; float accumulation, k ascending.
void matrix_multiply_naive(const float* a, const float* b, float* c, int m, int k, int n, dim3 grid, dim3 block,
                           cudaStream_t stream);
// Same with kMatrixTile x kMatrixTile shared-memory tiles of a and b (block is kMatrixTile^2 threads).
void matrix_multiply_tiled(const float* a, const float* b, float* c, int m, int k, int n, cudaStream_t stream,
                           dim3 grid = dim3(0, 0, 1));

// The covering grids the tiled launchers use when given grid.x = 0 or grid.y = 0.
dim3 matrix_add_tiled_grid(int rows, int cols);
dim3 matrix_multiply_tiled_grid(int m, int n);

}  // namespace engine::custom

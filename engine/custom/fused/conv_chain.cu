// The fused conv chain: one persistent kernel runs every spatial layer of a model (conv2d, pools,
// activations in epilogues) for a tile of T images per block with all intermediates in shared
// memory, and writes the chain's output flattened (CHW) to global memory. fused_layers.hpp says
// what the parameters mean; docs/design/custom-fused.md has the design and its measurements.
//
// The tiled convolution keeps OCB output channels x a few output rows of one output column per
// thread in registers. For each input channel and kernel column it loads that column's input values
// once and reuses them for every kernel row, and reads each weight row (OCB floats, one float4/float2
// broadcast load per 4/2 channels) once per output row group: 5x5 kernels with OCB = 8 and 4 rows do
// 160 FMAs per 18 shared-memory loads. Lanes of a warp take consecutive output columns, so the input
// loads of a warp hit consecutive banks. Square kernels are known at compile time (the kernel-column
// loop unrolls too). A 2x2 stride-2 pool that follows a tiled conv is done in its epilogue (rows in
// registers, columns with the partner lane through one shuffle), so the conv's full-size output never
// reaches shared memory and needs no pooling pass or buffer (LeNet-5: 24 KB -> 9.5 KB per image,
// twice the images per block). Work-item indices divide by a float reciprocal (a few instructions,
// exact for the shared-memory-sized ranges here) instead of integer division, which dominated the
// instruction mix otherwise; dense inputs are copied as is.
#include "engine/custom/fused/conv_layers.cuh"
#include "engine/custom/fused/fused_layers.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::fused {
namespace {

template <int K, int OCB>
__device__ __forceinline__ void run_tiled(const SpatialLayer& L, const float* staged, float* smem, int T) {
  if (L.rows == 2) conv_tiled<K, OCB, 2>(L, staged, smem, T);
  else conv_tiled<K, OCB, kConvRowsPerThread>(L, staged, smem, T);
}

__device__ void run_conv(const SpatialLayer& L, const float* staged, float* smem, int T) {
  switch (L.variant) {
    case ConvVariant::Generic4: conv_generic<4>(L, staged, smem, T); break;
    case ConvVariant::Generic8: conv_generic<8>(L, staged, smem, T); break;
    case ConvVariant::K2_4: run_tiled<2, 4>(L, staged, smem, T); break;
    case ConvVariant::K2_6: run_tiled<2, 6>(L, staged, smem, T); break;
    case ConvVariant::K2_8: run_tiled<2, 8>(L, staged, smem, T); break;
    case ConvVariant::K3_4: run_tiled<3, 4>(L, staged, smem, T); break;
    case ConvVariant::K3_6: run_tiled<3, 6>(L, staged, smem, T); break;
    case ConvVariant::K3_8: run_tiled<3, 8>(L, staged, smem, T); break;
    case ConvVariant::K5_4: run_tiled<5, 4>(L, staged, smem, T); break;
    case ConvVariant::K5_6: run_tiled<5, 6>(L, staged, smem, T); break;
    case ConvVariant::K5_8: run_tiled<5, 8>(L, staged, smem, T); break;
    default: break;  // the image chain's variants never reach this kernel
  }
}

__global__ void __launch_bounds__(kConvThreads, 2)
    conv_chain_kernel(const __grid_constant__ ConvChainParams p, const float* __restrict__ weights,
                      const float* __restrict__ x, float* __restrict__ y, int n) {
  extern __shared__ __align__(16) float smem[];
  // Conv weights and biases, staged once for every tile this block runs.
  for (int i = threadIdx.x; i < p.weight_floats; i += blockDim.x) smem[i] = weights[i];

  const int T = p.tile_images;
  const int tiles = (n + T - 1) / T;
  const int in_elements = p.input_channels * p.input_height * p.input_width;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int first = tile * T;
    const int images = min(T, n - first);
    // The tile's input: global [images][C][H][W] -> the first layer's buffer, consecutive threads
    // reading consecutive floats. Images past n in the last tile are zeros (computed, never stored).
    // Layers run over the tile's real images only (a batch of 1 does one image's work); the
    // buffers keep room for T.
    load_input_tile(p, x + size_t(first) * in_elements, images, smem);
    for (int l = 0; l < p.layer_count; ++l) {
      const SpatialLayer& L = p.layers[l];
      if (L.out.zero_fill) {
        zero_buffer(smem, L.out, T);
        __syncthreads();
      }
      if (L.op == SpatialOp::Conv) run_conv(L, smem, smem, images);
      else pool_layer(L, smem, images);
      __syncthreads();
    }
    // The last value, flattened CHW, to global memory: consecutive threads write consecutive floats.
    store_chain_output(p, smem, images, y + size_t(first) * p.output_elements, p.output_elements, Epilogue{});
    __syncthreads();  // the next tile overwrites the buffers
  }
}

}  // namespace

void conv_chain_prepare(int smem_bytes, const char* context) {
  CUDA_CHECK_CTX(cudaFuncSetAttribute(conv_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                 context);
}

int conv_chain_blocks_per_sm(int smem_bytes) {
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, conv_chain_kernel, kConvThreads, smem_bytes));
  return blocks;
}

void conv_chain_forward(const ConvChainParams& p, const float* weights, const float* x, float* y, int n, int blocks,
                        cudaStream_t stream, const char* context) {
  if (n <= 0) return;
  const int tiles = (n + p.tile_images - 1) / p.tile_images;
  const int grid = tiles < blocks ? tiles : blocks;
  conv_chain_kernel<<<grid, kConvThreads, size_t(p.smem_floats) * sizeof(float), stream>>>(p, weights, x, y, n);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::fused

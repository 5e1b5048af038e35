// The general path's GEMM with its K chunks on separate blocks (small batches): each chunk's sum to
// the scratch buffer, then the last block of each tile to finish (Mode::Partial, ordered_tile_sum) or
// a kernel of its own adds them to the bias in chunk order and runs the epilogue.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/custom/general/conv_gemm_kernel.cuh"

namespace engine::custom::general::kernel {
namespace {

// The chunks' sums of Mode::Partial added to the bias in chunk order, then the epilogue: one
// thread per output channel and row (pooled: per window of 4 rows), rows fastest.
template <bool POOL>
__global__ void chunk_sum_kernel(const float* __restrict__ partial, int count, GemmShape s, GemmEpilogue e, int64_t M) {
  const int oc = s.out_channels;
  const int64_t items = POOL ? M / 4 : M;
  const int64_t spatial = int64_t(s.out_height) * s.out_width, stride = int64_t(oc) * M;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < items * oc;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int n = int(idx / items);
    const int64_t item = idx - int64_t(n) * items;
    const float b0 = e.bias != nullptr ? e.bias[n] : 0.0f;
    if constexpr (POOL) {
      float v[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] = ordered_sum(b0, partial + int64_t(n) * M + item * 4 + r, count, stride);
      store_pooled(s, e, v, item, n);
    } else {
      const float t = ordered_sum(b0, partial + int64_t(n) * M + item, count, stride);
      const int64_t b = item / spatial;
      store_plain(e, t, b, item - b * spatial, spatial, n, oc);
    }
  }
}

}  // namespace

void launch_partial(const GemmArgs& a, GemmTile tile, ChunkScratch scratch, int64_t M, cudaStream_t stream,
                    const std::string& context) {
  if (scratch.arrivals == nullptr) throw std::logic_error(context + ": K chunks on blocks without arrival counters");
  if (launch_tile<Mode::Partial>(a, tile, scratch, M, stream, context)) return;
  const bool pooled = a.epilogue.pool_at >= 0;
  const int64_t items = (pooled ? M / 4 : M) * a.shape.out_channels;
  const int threads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>((items + threads - 1) / threads, 65535));
  if (pooled)
    chunk_sum_kernel<true><<<blocks, threads, 0, stream>>>(scratch.partial, a.chunks.count, a.shape, a.epilogue, M);
  else
    chunk_sum_kernel<false><<<blocks, threads, 0, stream>>>(scratch.partial, a.chunks.count, a.shape, a.epilogue, M);
  CUDA_CHECK_LAUNCH(context + ", ordered sum of the K chunks");
}

}  // namespace engine::custom::general::kernel

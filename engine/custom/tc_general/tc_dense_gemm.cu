// tc_dense_forward's and tc_pool_forward's kernels and launchers (tc_dense_gemm.hpp: what they
// compute; tc_dense_gemm.cuh: the bodies).
#include "engine/custom/tc_general/tc_dense_gemm.cuh"
#include "engine/gpu/cuda_check.hpp"

#include <algorithm>

namespace engine::custom::tcg {
namespace {

template <class T, int kTile, int kRead>
__global__ void __launch_bounds__(kTcgTiles[kTile].threads())
    tc_dense_kernel(const __grid_constant__ TcDenseArgs a, int m) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr TcgTileShape s = kTcgTiles[kTile];
  tc::tc_dense_block<T, s.bm, s.bn, s.wm, s.wn, kRead>(a, m, (long long)blockIdx.x, int(threadIdx.x), smem);
}

template <class T, int kTile, int kRead>
void set_smem(const std::string& context) {
  CUDA_CHECK_CTX(cudaFuncSetAttribute(tc_dense_kernel<T, kTile, kRead>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      tcg_smem_bytes(kTcgTiles[kTile])),
                 context);
}

template <class T, int kTile>
void set_smem_reads(const std::string& context) {
  set_smem<T, kTile, 0>(context), set_smem<T, kTile, 1>(context), set_smem<T, kTile, 2>(context);
}

template <class T, int kTile>
void launch(const TcDenseArgs& a, int m, cudaStream_t stream) {
  constexpr TcgTileShape s = kTcgTiles[kTile];
  const long long blocks = ((long long)m + s.bm - 1) / s.bm * ((a.cols + s.bn - 1) / s.bn);
  switch (tcg_read_of(a)) {
    case TcgRead::Rows:
      tc_dense_kernel<T, kTile, 0><<<unsigned(blocks), s.threads(), tcg_smem_bytes(s), stream>>>(a, m);
      break;
    case TcgRead::Pixels16:
      tc_dense_kernel<T, kTile, 1><<<unsigned(blocks), s.threads(), tcg_smem_bytes(s), stream>>>(a, m);
      break;
    case TcgRead::Image32:
      tc_dense_kernel<T, kTile, 2><<<unsigned(blocks), s.threads(), tcg_smem_bytes(s), stream>>>(a, m);
      break;
  }
}

template <class T>
void launch_tile(const TcDenseArgs& a, int tile, int m, cudaStream_t stream) {
  switch (tile) {
    case 0: launch<T, 0>(a, m, stream); break;
    case 1: launch<T, 1>(a, m, stream); break;
    default: launch<T, 2>(a, m, stream); break;
  }
}

template <class T>
__global__ void tc_pool_kernel(const __grid_constant__ TcPoolArgs a, long long pieces) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < pieces; i += step)
    tc::tc_pool_piece<T>(a, i);
}

}  // namespace

void tcg_prepare(const std::string& context) {
  set_smem_reads<__half, 0>(context), set_smem_reads<__half, 1>(context), set_smem_reads<__half, 2>(context);
  set_smem_reads<__nv_bfloat16, 0>(context), set_smem_reads<__nv_bfloat16, 1>(context),
      set_smem_reads<__nv_bfloat16, 2>(context);
}

void tc_dense_forward(const TcDenseArgs& args, TcgOperands operands, int tile, int m, cudaStream_t stream,
                      const std::string& context) {
  if (m <= 0) return;
  if (operands == TcgOperands::BF16) launch_tile<__nv_bfloat16>(args, tile, m, stream);
  else launch_tile<__half>(args, tile, m, stream);
  CUDA_CHECK_LAUNCH(context);
}

void tc_pool_forward(const TcPoolArgs& args, TcgOperands operands, int n, cudaStream_t stream,
                     const std::string& context) {
  const long long pieces = (long long)n * args.oh * args.ow * (args.pitch / 8);
  if (pieces <= 0) return;
  constexpr int kThreads = 256;
  const long long blocks = std::min<long long>((pieces + kThreads - 1) / kThreads, 1LL << 20);
  if (operands == TcgOperands::BF16)
    tc_pool_kernel<__nv_bfloat16><<<unsigned(blocks), kThreads, 0, stream>>>(args, pieces);
  else
    tc_pool_kernel<__half><<<unsigned(blocks), kThreads, 0, stream>>>(args, pieces);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::tcg

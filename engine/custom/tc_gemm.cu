// tc_gemm_forward's kernel and launcher (tc_gemm.hpp: what it computes; tc_gemm.cuh: the body).
#include "engine/custom/tc_gemm.cuh"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

template <int kOps, int kCols>
__global__ void __launch_bounds__(kTcGemmThreads) tc_gemm_kernel(const __grid_constant__ TcGemmArgs a, int n) {
  __shared__ __align__(16) unsigned char smem[tc_gemm_smem_bytes(kCols)];
  tc::tc_gemm_block<kOps, kCols>(a, n, (long long)blockIdx.x, int(blockIdx.y), int(threadIdx.x), smem);
}

template <int kCols>
void launch(const TcGemmArgs& args, TcGemmOperands operands, int n, long long rows, cudaStream_t stream) {
  const dim3 grid(unsigned((rows + kTcGemmRows - 1) / kTcGemmRows),
                  unsigned((args.shape.out_channels + kCols - 1) / kCols));
  switch (operands) {
    case TcGemmOperands::FP16: tc_gemm_kernel<int(TcGemmOperands::FP16), kCols><<<grid, kTcGemmThreads, 0, stream>>>(args, n); break;
    case TcGemmOperands::BF16: tc_gemm_kernel<int(TcGemmOperands::BF16), kCols><<<grid, kTcGemmThreads, 0, stream>>>(args, n); break;
    case TcGemmOperands::INT8: tc_gemm_kernel<int(TcGemmOperands::INT8), kCols><<<grid, kTcGemmThreads, 0, stream>>>(args, n); break;
  }
}

}  // namespace

void tc_gemm_forward(const TcGemmArgs& args, TcGemmOperands operands, int n, cudaStream_t stream,
                     const std::string& context) {
  if (n <= 0) return;
  const long long rows = (long long)n * args.shape.out_height * args.shape.out_width;
  if (tc_gemm_wide(args.shape.out_channels, rows)) launch<kTcGemmWideCols>(args, operands, n, rows, stream);
  else launch<kTcGemmCols>(args, operands, n, rows, stream);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom

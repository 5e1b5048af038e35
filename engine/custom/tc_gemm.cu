// tc_gemm_forward's kernel and launcher (tc_gemm.hpp: what it computes; tc_gemm.cuh: the body).
#include "engine/custom/tc_gemm.cuh"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

template <int kOps>
__global__ void __launch_bounds__(kTcGemmThreads) tc_gemm_kernel(const __grid_constant__ TcGemmArgs a, int n) {
  __shared__ __align__(16) unsigned char smem[kTcGemmSmemBytes];
  tc::tc_gemm_block<kOps>(a, n, (long long)blockIdx.x, int(blockIdx.y), int(threadIdx.x), smem);
}

}  // namespace

void tc_gemm_forward(const TcGemmArgs& args, TcGemmOperands operands, int n, cudaStream_t stream,
                     const std::string& context) {
  if (n <= 0) return;
  const long long rows = (long long)n * args.shape.out_height * args.shape.out_width;
  const dim3 grid(unsigned((rows + kTcGemmRows - 1) / kTcGemmRows),
                  unsigned((args.shape.out_channels + kTcGemmCols - 1) / kTcGemmCols));
  switch (operands) {
    case TcGemmOperands::FP16: tc_gemm_kernel<int(TcGemmOperands::FP16)><<<grid, kTcGemmThreads, 0, stream>>>(args, n); break;
    case TcGemmOperands::BF16: tc_gemm_kernel<int(TcGemmOperands::BF16)><<<grid, kTcGemmThreads, 0, stream>>>(args, n); break;
    case TcGemmOperands::INT8: tc_gemm_kernel<int(TcGemmOperands::INT8)><<<grid, kTcGemmThreads, 0, stream>>>(args, n); break;
  }
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom

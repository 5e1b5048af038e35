#pragma once
// tc_gemm_forward: conv2d or dense on tensor cores (mma.sync) for the per-node path of
// --precision fp16|bf16|int8, the path every model outside the tensor-core chain's family takes
// (fused/tc_chain_params.hpp states that family).
//
// Both ops are one implicit GEMM: rows = output pixels of every image (n * OH * OW), columns =
// output channels, k = (input channel, kernel row, kernel column); a dense layer is the 1x1
// convolution of a [K, 1, 1] input. Values between layers stay fp32 in the arena (like PyTorch's
// autocast): the kernel rounds its input to the operand type while it stages it in shared memory
// (fp16/bf16: round to nearest even; int8: q = clamp(rne(x / s_in), -127, 127), the reference
// emulation's quantization, with an IEEE division), reads weights converted once at plan time
// (tc_gemm_weights), sums in fp32 (int8: exact int32), and writes act(sum + bias) (int8:
// act(fmaf(sum, s_in * s_o, bias))) in fp32. Pools, activations, softmax, add, concat and
// scale_shift stay the fp32 per-node kernels.
//
// Deterministic: every output's sum runs over k in the same order whatever its row's place in a
// tile, so results are the same bits for any batch or batch split.
#include <cuda_runtime_api.h>

#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom {

enum class TcGemmOperands : int { FP16 = 0, BF16 = 1, INT8 = 2 };

// One block: 64 rows x 32 output channels (narrow) or 64 x 128 (wide), 4 warps (16 rows each), k
// staged 64 bytes at a time (32 16-bit or 64 8-bit operands), shared-memory rows padded to 80 bytes
// (no bank conflicts on the fragment loads). Every block gathers and converts its 64 rows' inputs
// itself, so a layer of OC channels gathers each input OC / 32 times with narrow blocks and OC / 128
// times with wide ones; wide blocks are 4x fewer, so narrow ones run where wide ones would leave SMs
// idle (tc_gemm_wide). An output's sum is the same on either (the same k order, the same mma per
// element): the same bits.
inline constexpr int kTcGemmRows = 64;
inline constexpr int kTcGemmCols = 32;       // narrow
inline constexpr int kTcGemmWideCols = 128;  // wide; weights are padded to a multiple of it
inline constexpr int kTcGemmThreads = 128;
inline constexpr int kTcGemmStageBytes = 64;
inline constexpr int kTcGemmPitchBytes = 80;
inline constexpr int tc_gemm_smem_bytes(int cols) { return (kTcGemmRows + cols) * kTcGemmPitchBytes; }
// Wide blocks for a layer of `out_channels` over `rows` GEMM rows: where the layer has more than one
// narrow tile of channels and the wide grid still has kTcGemmWideMinBlocks blocks (a few per SM).
inline constexpr long long kTcGemmWideMinBlocks = 512;
inline bool tc_gemm_wide(int out_channels, long long rows) {
  const long long row_blocks = (rows + kTcGemmRows - 1) / kTcGemmRows;
  return out_channels > kTcGemmCols &&
         row_blocks * ((out_channels + kTcGemmWideCols - 1) / kTcGemmWideCols) >= kTcGemmWideMinBlocks;
}

inline int tc_gemm_operand_bytes(TcGemmOperands o) { return o == TcGemmOperands::INT8 ? 1 : 2; }
// Operands per stage of k: 32 (16-bit) or 64 (int8).
inline int tc_gemm_stage_k(TcGemmOperands o) { return kTcGemmStageBytes / tc_gemm_operand_bytes(o); }

struct TcGemmShape {
  int channels = 1, height = 1, width = 1;              // input [C, H, W] per sample
  int out_channels = 1, out_height = 1, out_width = 1;  // output [OC, OH, OW] per sample
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0;  // bottom/right padding is implied by out_height/out_width
  __host__ __device__ int k() const { return channels * kernel_h * kernel_w; }
};

struct TcGemmArgs {
  const float* x = nullptr;    // [n, C, H, W]
  float* y = nullptr;          // [n, OC, OH, OW]; must not overlap x
  const void* weight = nullptr;  // [oc_padded][k_padded] operands, k = (c, ky, kx), zeros past K and OC;
                                 // oc_padded a multiple of kTcGemmWideCols
  const float* bias = nullptr;   // [oc_padded], zeros where the model has none
  const float* scale = nullptr;  // int8: [oc_padded] s_in * s_o per output channel; otherwise null
  float in_scale = 0;            // int8: s_in of the input (range / 127); 0 quantizes everything to 0
  int k_padded = 0;              // a multiple of tc_gemm_stage_k
  TcGemmShape shape;
  Activation activation = Activation::None;
};

void tc_gemm_forward(const TcGemmArgs& args, TcGemmOperands operands, int n, cudaStream_t stream,
                     const std::string& context);

}  // namespace engine::custom

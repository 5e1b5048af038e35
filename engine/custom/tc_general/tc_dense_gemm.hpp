#pragma once
// tc_dense_forward: one dense or convolution layer of the tensor-core general path
// (tc_general_plan.hpp) as a GEMM on mma.sync m16n8k16, fp16 or bf16 operands, fp32 sums; a
// convolution is an implicit GEMM (TcConvGeometry: rows are output pixels, k runs over taps and
// input channels), its output rows the NHWC pixels of the next layer's input.
//
//   y[m][n] = r(act(r(bias[n] + sum_k x[m][k] w[n][k])))     r: rounding to the operand type
//
// exactly where the reference's emulation rounds (the dense node's output, then the activation's).
// x is the previous layer's 16-bit rows (pitch a multiple of 8 elements, 16-byte aligned) or, for a
// first layer, the preprocessed fp32 input, rounded to the operand type while it is staged. y is
// 16-bit rows for the next layer (every column up to the pitch written: a padded column holds
// act(0), which meets only zero weights) or fp32 for a graph output. Weights are packed once at plan
// time as [N padded to 128][K padded to 32], zeros in the padding.
//
// A block computes a BM x BN tile with warps of WM x WN: per stage of 32 values of k, cp.async
// copies the tile's rows of x and w into shared memory (3 stages in flight; rows padded to 80 bytes,
// so the 8 rows an ldmatrix phase reads fall in distinct banks), ldmatrix loads the fragments.
// Every output's sum runs over k in the same order (16 at a time, in stage order) whatever tile or
// batch it is in: the same bits for any tile, batch and batch split.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom::tcg {

enum class TcgOperands : int { FP16 = 0, BF16 = 1 };

struct TcgTileShape {
  int bm, bn, wm, wn;
  constexpr int threads() const { return 32 * (bm / wm) * (bn / wn); }
};
// The block tiles, largest first.
inline constexpr int kTcgTileCount = 3;
inline constexpr TcgTileShape kTcgTiles[kTcgTileCount] = {{128, 128, 64, 32}, {64, 64, 32, 32}, {64, 32, 32, 16}};
inline const char* tcg_tile_name(int tile) {
  return tile == 0 ? "128x128" : tile == 1 ? "64x64" : "64x32";
}

inline constexpr int kTcgBk = 32;       // values of k per stage
inline constexpr int kTcgStages = 3;    // stages in flight
inline constexpr int kTcgPitch = 40;    // 16-bit elements per shared-memory row (80 bytes)
inline constexpr int kTcgRowAlign = 128;  // packed weight rows (output channels) padded to this
inline constexpr int tcg_smem_bytes(const TcgTileShape& t) { return kTcgStages * (t.bm + t.bn) * kTcgPitch * 2; }

// A convolution as an implicit GEMM (kh > 0): row m of x is output pixel m % (oh * ow) of image
// m / (oh * ow); its k-th value is
//   16-bit x, NHWC with channel pitch `pitch` (a multiple of 8): tap k / pitch, channel k % pitch;
//   fp32 x (a first layer), NCHW with `pitch` channels: channel k / (kh kw), tap k % (kh kw);
// taps (ky, kx) row-major, read at (oy sh - pt + ky, ox sw - pl + kx), zero outside the image.
struct TcConvGeometry {
  int kh = 0, kw = 0;       // 0: a dense layer (x is rows of ldx)
  int sh = 1, sw = 1, pt = 0, pl = 0;
  int h = 0, w = 0;         // input size
  int oh = 0, ow = 0;       // output size
  int pitch = 0;            // channels of an input pixel
};

struct TcDenseArgs {
  const void* x = nullptr;  // [m][ldx]: fp32 (x_f32) or 16-bit; a convolution: conv says how rows are read
  bool x_f32 = false;
  int ldx = 0;              // elements between rows of x; 16-bit: a multiple of 8
  int k = 0;                // features of a row of x read (16-bit: ldx; its padding meets zero weights)
  void* y = nullptr;        // [m][ldy]: fp32 (y_f32) or 16-bit
  bool y_f32 = false;
  int ldy = 0;              // elements between rows of y; 16-bit: a multiple of 8
  int cols = 0;             // columns written: fp32 the layer's units, 16-bit ldy
  const void* w = nullptr;  // [>= cols rounded up to kTcgRowAlign][k_padded] 16-bit
  const float* bias = nullptr;  // [same rows], zeros in the padding
  int k_padded = 0;         // a multiple of kTcgBk
  Activation act = Activation::None;
  TcConvGeometry conv;
  // A convolution with a residual (the add after it): y = r(post_act(r(r(act(r(sum + bias))) + res)))
  // with res 16-bit NHWC pixels like y's (pitch ldres).
  const uint16_t* res = nullptr;
  int ldres = 0;
  Activation post_act = Activation::None;
};

// How a layer's kernel reads x: rows (a dense layer, fp32 or 16-bit), 16-bit NHWC pixels or the fp32
// NCHW input image (a convolution).
enum class TcgRead : int { Rows = 0, Pixels16 = 1, Image32 = 2 };
inline TcgRead tcg_read_of(const TcDenseArgs& a) {
  return a.conv.kh == 0 ? TcgRead::Rows : a.x_f32 ? TcgRead::Image32 : TcgRead::Pixels16;
}

// The tile for `rows` x `cols` outputs on `sms` multiprocessors: 64x32 for at most 32 columns; else
// 128x128 where its grid still gives every multiprocessor a block and wastes at most a quarter of
// its columns; else 64x64.
inline int choose_tcg_tile(long long rows, int cols, int sms) {
  if (cols <= 32) return 2;
  const long long col_blocks = (cols + 127) / 128;
  const bool little_waste = col_blocks * 128 * 3 <= 4LL * cols;
  return little_waste && ((rows + 127) / 128) * col_blocks >= sms ? 0 : 1;
}

// A max or average pool on 16-bit NHWC activations (channel pitch a multiple of 8), taps outside the
// image skipped. The maximum of values already in the format is exact: no rounding, the same bits
// in fp16 and bf16 (both order like sign-magnitude integers). The average: an fp32 sum in tap order
// over the divisor (the window, or its taps inside the image), rounded to the format.
struct TcPoolArgs {
  const uint16_t* x = nullptr;  // [n][h][w][pitch]
  uint16_t* y = nullptr;        // [n][oh][ow][pitch]
  int h = 0, w = 0, oh = 0, ow = 0, pitch = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0;
  bool average = false, count_include_pad = true;
};

// Opts every tile's kernel into its shared memory on the current device; throws CudaError.
void tcg_prepare(const std::string& context);

// `tile`: an index of kTcgTiles; any gives the same bits.
void tc_dense_forward(const TcDenseArgs& args, TcgOperands operands, int tile, int m, cudaStream_t stream,
                      const std::string& context);

void tc_pool_forward(const TcPoolArgs& args, TcgOperands operands, int n, cudaStream_t stream,
                     const std::string& context);

}  // namespace engine::custom::tcg

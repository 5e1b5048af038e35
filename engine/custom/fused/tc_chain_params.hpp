#pragma once
// The tensor-core chain: the custom backend's fp16 / bf16 / int8 path. One kernel runs a
// whole network of the LeNet-5 family on mma.sync (m16n8k16 with 16-bit operands and fp32 sums, or
// m16n8k32 with int8 operands and int32 sums: TcInt8Params below), from the preprocessed fp32 input
// to fp32 outputs, every intermediate on chip:
//
//   input [1][32][32] -> conv 5x5 (<= 8 channels) -> act -> pool 2x2/2 -> conv 5x5 (<= 16 channels)
//   -> act -> pool 2x2/2 -> flatten (<= 400) -> dense (<= 128 units) -> act -> dense (<= 96) -> act
//   -> dense (<= 16) -> [act] -> [softmax]
//
// act: none, relu, tanh or sigmoid; pool: average or max; stride 1 convolutions, no padding but c1's
// on a [1][28][28] input (padded by 2 on each side: the same [32][32], zero-padded while the kernel
// stages the image in shared memory; the zoo's LeNet-5s). Smaller
// layers are zero-padded to these sizes at plan time (a zero weight row or column adds nothing).
// tc_chain_plan.cpp decides whether a graph has this shape and says why not; tc_chain.cuh holds the
// 16-bit layers, tc_int8_chain.cuh the int8 ones (docs/design/custom-tensor-core.md). Plain structs: included from .cu files and host code.
#include <cstdint>

namespace engine::custom::tc {

inline constexpr int kIn = 32;                // input [32][32] (as c1 reads it)
inline constexpr int kInPadded = 28, kInPad = 2;  // or input [28][28], c1 padding it by 2 on each side
inline constexpr int kPaddedVec4 = kInPadded * kInPadded / 4;  // its float4s per image: 196 (7 per row)
inline constexpr int kP1 = 14;                // c1's output 28x28, pooled 14x14
inline constexpr int kC1Out = 8;              // c1's channels, padded
inline constexpr int kC1Pitch = 40;           // elements per c1 weight row [8 oc][32 taps] (80 B: ldmatrix rows on distinct banks)
inline constexpr int kC3In = 14, kC3Ch = 8;   // c3's input [14][14][8] (channels-last)
inline constexpr int kC3Out = 16;             // c3's channels, padded
inline constexpr int kC3KTiles = 13, kC3Pitch = 216;  // K = 25 taps x 8 channels = 200 -> 208
inline constexpr int kC3MTiles = 7;           // 25 pool windows x 4 pixels = 100 rows -> 112
inline constexpr int kF5K = 400, kF5N = 128, kTilePitch = 408;  // f5: K 400 (25 k-tiles), N <= 128
inline constexpr int kF6K = 128, kF6N = 96, kF6Pitch = 136;     // f6: K <= 128, N <= 96
inline constexpr int kF7K = 96, kF7N = 16, kF7Pitch = 104;      // f7: K <= 96, N <= 16

// Shared memory, in 16-bit elements: the dense weights, then per warp (version 1) or per pair of
// warps (version 2) the buffers of its images.
inline constexpr int kSmemF5 = 0;
inline constexpr int kSmemF6 = kSmemF5 + kF5N * kTilePitch;
inline constexpr int kSmemF7 = kSmemF6 + kF6N * kF6Pitch;
inline constexpr int kSmemWarp0 = kSmemF7 + kF7N * kF7Pitch;  // every term a multiple of 8: 16-byte aligned
// Version 1: 4 warps, each a 16-image tile of its own; input as fp32 by cp.async.
inline constexpr int kSoloWarps = 4;
inline constexpr int kWarpIn = 0;  // fp32 [32][32]: 2,048 elements
inline constexpr int kWarpC3In = kWarpIn + 2 * kIn * kIn;
inline constexpr int kWarpTile = kWarpC3In + kC3In * kC3In * kC3Ch;
inline constexpr int kWarpElems = kWarpTile + 16 * kTilePitch;
inline constexpr int kSoloSmemBytes = (kSmemWarp0 + kSoloWarps * kWarpElems) * 2;
// Version 2: 8 warps in 4 pairs; a pair fills one tile, each warp its own input (16-bit) and c3 input.
inline constexpr int kPairWarps = 8;
inline constexpr int kPairElems = 16 * kTilePitch + 2 * (kC3In * kC3In * kC3Ch + kIn * kIn);
inline constexpr int kPairSmemBytes = (kSmemWarp0 + (kPairWarps / 2) * kPairElems) * 2;

enum class TcAct : int { None = 0, Relu = 1, Tanh = 2, Sigmoid = 3 };

// Kernel signatures: the activations and pools fixed at compile time for the common members (their
// epilogues then have no branches), or read from the parameters.
inline constexpr int kSigGeneric = 0;
inline constexpr int kSigTanhAvg = 1;  // tanh after c1, c3, f5, f6, average pools, none after f7 (LeNet-5)
inline constexpr int kSigReluMax = 2;  // relu after c1, c3, f5, f6, max pools, none after f7

// The kernel's parameters. Weights are 16-bit (fp16 or bf16, the executable's choice), already
// padded and laid out as the kernel reads them; biases fp32.
struct TcChainParams {
  const void* c1 = nullptr;  // [8][kC1Pitch]: channel, tap (25 real)
  const float* c1_bias = nullptr;  // [8]
  const void* c3 = nullptr;  // [16][kC3Pitch]: channel, k = tap * 8 + input channel
  const float* c3_bias = nullptr;  // [16]
  const void* f5 = nullptr;  // [128][kTilePitch]: unit, k (CHW flatten of c3's pooled output)
  const float* f5_bias = nullptr;  // [128]
  const void* f6 = nullptr;  // [96][kF6Pitch]
  const float* f6_bias = nullptr;  // [96]
  const void* f7 = nullptr;  // [16][kF7Pitch]
  const float* f7_bias = nullptr;  // [16]
  int act[5] = {};           // TcAct after c1, c3, f5, f6, f7
  int pool_max[2] = {};      // 1: the pool after c1 / c3 takes the maximum, 0: the average
  int units = 10;            // the last layer's units (<= 16): floats per image of the output
  int softmax = 1;           // 1: the output is the softmax of the last layer's (activated) values
  int padded_input = 0;      // 1: x is [n][28][28], staged into [32][32] with zeros around it
};

// int8 (--precision int8; the same family, with the model's calibration): the operands int8, sums
// int32 (exact) on mma.sync m16n8k32, as the reference's emulation defines it (engine/reference/
// reduced_precision.hpp): each conv and dense reads its input quantized per tensor, q = clamp(rne(x /
// s), -127, 127) with s = the calibrated range / 127 (the kernel multiplies by 1 / s, as TensorRT's
// scales do: a value within ~1 ulp of a rounding boundary may land one step from the reference's), and
// its weights quantized per output channel; the sum times s * s_o plus the bias (one fma), then
// activation, pooling and softmax in fp32. Layouts in bytes:
inline constexpr int kQC1Pitch = 48;          // c1 weights [8][48]: 32 taps (25 real)
inline constexpr int kQC3TapCols = 6;         // c3's taps ky * 6 + kx: pairs of taps adjacent in x share a 16-byte row
inline constexpr int kQC3KTiles = 8;          // K = 32 taps x 8 channels = 256 (taps with kx or ky = 5: zero weights)
inline constexpr int kQC3Pitch = 272;         // c3 weights [16][272]
inline constexpr int kQC3InRows = 15, kQC3InCols = 16;  // c3's input [15][16][8]: the zero-weight taps stay inside
inline constexpr int kQF5KTiles = 13, kQF5Pitch = 432;  // f5: K 400 -> 416
inline constexpr int kQF6KTiles = 4, kQF6Pitch = 144;   // f6: K <= 128
inline constexpr int kQF7KTiles = 3, kQF7Pitch = 112;   // f7: K <= 96 (every pitch an odd number of 16-byte units)
inline constexpr int kQSmemF5 = 0;
inline constexpr int kQSmemF6 = kQSmemF5 + kF5N * kQF5Pitch;
inline constexpr int kQSmemF7 = kQSmemF6 + kF6N * kQF6Pitch;
inline constexpr int kQSmemWarp0 = kQSmemF7 + kF7N * kQF7Pitch;  // 70,912
// c3's input twice: ldmatrix rows must start 16-byte aligned, and a pixel's 8 channels are 8 bytes,
// so a lane whose pixel column is odd reads a second copy stored 8 bytes further (both written by c1).
inline constexpr int kQC3InBytes = kQC3InRows * kQC3InCols * kC3Ch;  // 1,920
inline constexpr int kQC3InBuf = 2 * kQC3InBytes + 16;               // the two copies (the second at +8)
inline constexpr int kQPairBytes = 16 * kQF5Pitch + 2 * (kQC3InBuf + kIn * kIn);
inline constexpr int kQPairs = 4;
inline constexpr int kQSmemBytes = kQSmemWarp0 + kQPairs * kQPairBytes;  // 137,600

struct TcInt8Params {
  const void* c1 = nullptr;  // int8 [8][kQC1Pitch]
  const void* c3 = nullptr;  // int8 [16][kQC3Pitch]: channel, k = (ky * 6 + kx) * 8 + input channel
  const void* f5 = nullptr;  // int8 [128][kQF5Pitch]
  const void* f6 = nullptr;  // int8 [96][kQF6Pitch]
  const void* f7 = nullptr;  // int8 [16][kQF7Pitch]
  // Per output channel or unit: s_in * s_o (the sum's scale), and the bias; padded with zeros.
  const float* c1_scale = nullptr;  // [8]
  const float* c1_bias = nullptr;
  const float* c3_scale = nullptr;  // [16]
  const float* c3_bias = nullptr;
  const float* f5_scale = nullptr;  // [128]
  const float* f5_bias = nullptr;
  const float* f6_scale = nullptr;  // [96]
  const float* f6_bias = nullptr;
  const float* f7_scale = nullptr;  // [16]
  const float* f7_bias = nullptr;
  float in_scale[5] = {};    // s of the inputs of c1, c3, f5, f6, f7 (range / 127)
  float in_inv[5] = {};      // 1 / s (0 where s is 0: q = 0, as the reference's), what the kernel multiplies by
  int act[5] = {};           // as TcChainParams
  int pool_max[2] = {};
  int units = 10;
  int softmax = 1;
  int padded_input = 0;      // as TcChainParams (the zeros quantize to 0)
};

}  // namespace engine::custom::tc

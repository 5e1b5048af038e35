#pragma once
// The tensor-core chain (issue 15): the custom backend's fp16 / bf16 path. One kernel runs a whole
// network of the LeNet-5 family on mma.sync m16n8k16 (16-bit operands, fp32 sums), from the
// preprocessed fp32 input to fp32 outputs, every intermediate on chip:
//
//   input [1][32][32] -> conv 5x5 (<= 8 channels) -> act -> pool 2x2/2 -> conv 5x5 (<= 16 channels)
//   -> act -> pool 2x2/2 -> flatten (<= 400) -> dense (<= 128 units) -> act -> dense (<= 96) -> act
//   -> dense (<= 16) -> [act] -> [softmax]
//
// act: none, relu, tanh or sigmoid; pool: average or max; no padding, stride 1 convolutions. Smaller
// layers are zero-padded to these sizes at plan time (a zero weight row or column adds nothing).
// tc_chain_plan.cpp decides whether a graph has this shape and says why not; tc_chain.cuh holds the
// layers; the probe it grew from, with its four versions, is tools/probes/lenet_fp16_mma.cu
// (docs/perf-custom-tensor-core.md). Plain structs: included from .cu files and host code.
#include <cstdint>

namespace engine::custom::tc {

inline constexpr int kIn = 32;                // input [32][32]
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
};

}  // namespace engine::custom::tc

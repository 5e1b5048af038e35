#pragma once
// conv_gemm_forward: a conv2d or dense node as an fp32 implicit GEMM with its epilogue fused.
//
// C[m][n] = sum_k A[m][k] * B[k][n]: m an output pixel of one sample (M = batch * OH * OW), n an
// output channel (or unit), k = (c * kh + p) * kw + q an input channel and window position (dense:
// k the input feature). A is gathered from the NCHW input on the fly (a table maps k to the channel
// offset and window position); B is the weight packed at plan time as [K][OC padded]. A block
// computes a BM x BN tile of C in registers (thread tiles of TM x TN), staging BK = 8 values of k
// of A and B per step in shared memory (a 4-stage cp.async pipeline).
//
// Determinism: the K range is padded with zeros to a multiple of BK (the same BK for every tile
// shape) and cut into a fixed number of chunks chosen from the layer's shape alone (GemmChunks,
// never the batch). Each chunk is one fp32 accumulator started at 0, fmaf over its k in order; the
// output is the bias (or 0) plus the chunk sums in chunk order. One chunk: the accumulator starts
// at the bias. A small batch runs the chunks on separate blocks (partial sums to a scratch buffer;
// the last block of a tile to finish adds them in order and runs the epilogue); a large one runs
// every chunk of an output in the same thread. Both do the same operations in the same order, so the bits depend neither on the
// tile, nor on the batch, nor on how the chunks are spread.
//
// Epilogue: up to kMaxStages stages (activation, per-channel scale_shift, add of a residual) in
// order, optionally a 2x2 stride-2 max pool after the first `pool_at` of them (the rows of a block
// are then ordered so that each thread holds whole pooling windows), then a store into a view of
// the output buffer (a concat's channel slice: per-sample stride and offset).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/custom/launch_common.hpp"

namespace engine::custom::general {

inline constexpr int kGemmBk = 8;     // k values per shared-memory step (fixed: it sets the padding)
inline constexpr int kMaxStages = 4;  // epilogue stages after the bias
inline constexpr int kMaxTileN = 128;  // packed weights are padded to a multiple of this
// A k table's window row past K: no input row has it, so the loader's bounds test fails.
inline constexpr int kKTableNoRow = -(1 << 29);

struct GemmShape {
  // conv: input [channels, height, width] -> output [out_channels, out_height, out_width] per sample.
  // dense: channels = in features, out_channels = units, every spatial size and the window 1.
  int channels = 1, height = 1, width = 1;
  int out_channels = 1, out_height = 1, out_width = 1;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0;
  bool dense = false;
  int64_t k() const { return int64_t(channels) * kernel_h * kernel_w; }
};

enum class StageKind : int { Act = 0, ScaleShift = 1, Add = 2 };

struct Stage {
  StageKind kind = StageKind::Act;
  Activation act = Activation::None;
  const float* scale = nullptr;     // ScaleShift: [out_channels]
  const float* shift = nullptr;
  const float* residual = nullptr;  // Add: [n, out_channels, spatial] where the stage applies
};

struct GemmEpilogue {
  const float* bias = nullptr;  // [out_channels] or null
  Stage stages[kMaxStages];
  int count = 0;
  int pool_at = -1;  // -1: no pool; else the fused 2x2 max pool runs after stages [0, pool_at)
  float* y = nullptr;              // output view: sample b's element e at y[b * y_stride + y_offset + e]
  int64_t y_stride = 0, y_offset = 0;
};

// How a layer's K range is cut: `count` chunks of `tiles` steps of kGemmBk (the last may be shorter).
struct GemmChunks {
  int count = 1;
  int tiles = 0;  // with count 1: every step
};
inline constexpr int kMaxGemmChunks = 128;
inline constexpr int kMinChunkTiles = 4;        // a chunk sums at least 32 k values
inline constexpr int kChunkTargetBlocks = 256;  // blocks a batch of 1 should have (a fixed count: the
                                                // chunks, hence the bits, are the same on every device)

struct GemmArgs {
  const float* x = nullptr;       // [n, channels, height, width], contiguous
  const float* weight = nullptr;  // [K padded to kGemmBk][oc_padded]
  // conv: per k of K padded to kGemmBk, {c * H * W, p, q, (c * H + p) * W + q} (past K:
  // {0, kKTableNoRow, 0, 0}); dense: null
  const int4* k_table = nullptr;
  int oc_padded = 0;
  // Dense: copy rows of A 16 bytes at a time where K is a multiple of 4 and x is 16-byte aligned
  // (else 4 bytes at a time). The same operations in the same order either way.
  bool dense_row_copies = false;
  GemmShape shape;
  GemmChunks chunks;
  GemmEpilogue epilogue;
};

// The block tiles the kernel is built for, smallest to largest work per block.
enum class GemmTile : int { T32x32 = 0, T64x16, T64x32, T64x64, T128x32, T128x64, T128x128, Count };
struct GemmTileShape {
  int bm, bn;
};
GemmTileShape gemm_tile_shape(GemmTile t);
const char* gemm_tile_name(GemmTile t);
// The tile for `rows` output rows (pixels, or pooled windows x 4) and `cols` output channels: the
// largest that still gives every SM at least one block and wastes at most a quarter of its work on
// padding; else the one with the most blocks. Any choice gives the same bits.
GemmTile choose_gemm_tile(int64_t rows, int cols, int multiprocessors);
// Rows of C for a batch of n: n * OH * OW (pooled: n * 4 * (OH / 2) * (OW / 2)).
int64_t gemm_rows(const GemmShape& s, bool pooled, int n);

// The chunks of a layer, from its shape alone: enough that a batch of 1 gives about
// rule.target_blocks blocks of the smallest tile, each chunk at least rule.min_tiles steps.
struct ChunkRule {
  int min_tiles = kMinChunkTiles;
  int target_blocks = kChunkTargetBlocks;
};
GemmChunks plan_gemm_chunks(const GemmShape& s, bool pooled, const ChunkRule& rule = {});
// Whether a launch of `rows` x `cols` outputs runs its chunks on separate blocks: when even the
// smallest tile leaves multiprocessors without a block.
bool chunks_across_blocks(int64_t rows, int cols, int multiprocessors);
// Floats of scratch the chunks of such a launch need: chunks x rows x cols.
inline int64_t gemm_partial_floats(int64_t rows, int cols, const GemmChunks& c) { return int64_t(c.count) * rows * cols; }
// Arrival counters such a launch needs (one per output tile): a bound over every tile shape.
inline int64_t gemm_arrival_counters(int64_t rows, int cols) { return ((rows + 31) / 32) * ((cols + 15) / 16); }

// Scratch of a launch that runs its chunks on separate blocks: `partial`, gemm_partial_floats()
// floats for the chunk sums; `arrivals`, gemm_arrival_counters() counters, zero between launches
// (the last block of a tile to arrive adds the chunk sums in order, runs the epilogue and resets
// its counter).
struct ChunkScratch {
  float* partial = nullptr;
  unsigned* arrivals = nullptr;
};

// One conv2d/dense node. `scratch.partial` null: the chunks run in one thread; unused with one chunk.
void conv_gemm_forward(const GemmArgs& args, GemmTile tile, ChunkScratch scratch, int n, cudaStream_t stream,
                       const std::string& context);

}  // namespace engine::custom::general

#pragma once
// The custom backend's own compile choices, beyond CompileOptions: which of its kernels a compile
// picks where more than one gives a valid plan. The defaults are the registry's ("custom"); tests
// pass other values to make_custom_backend to drive the other kernels on the same models.
#include <optional>

#include "engine/gpu/precision_choice.hpp"

namespace engine::custom {

// The fused fp32 path's image chain (small batches: one image per block or per cluster of blocks).
struct ImageChainOptions {
  // The largest batch the image chain runs; nullopt: 12 images per SM (where it beats the tiled
  // kernels, docs/design/custom-fused.md); 0: never (the tiled kernels at every batch).
  std::optional<int> max_batch;
  // The largest cluster of blocks per image (1: one block per image); the device may allow fewer.
  int max_cluster = 8;
  // The general cluster kernel even where one specialised for the chain qualifies (same bits).
  bool general_cluster_kernel = false;
  // Which conv layers take items of one output channel: those whose items then fit a block's
  // threads, up to conv_split_items items (0: none), in clusters of conv_split_blocks blocks and
  // more; nullopt: the planner's rule (fused_plan.cpp). Same bits either way.
  std::optional<int> conv_split_items;
  std::optional<int> conv_split_blocks;
};

// The tensor-core chain (fp16 / bf16 / int8 models of its family).
struct TcChainOptions {
  bool one_warp_per_tile = false;  // version 1 (one warp per tile) instead of version 2; not for int8
  bool accurate_tanh = false;      // tanhf instead of tanh.approx
  bool generic_kernel = false;     // activations and pools read from the parameters, whatever the model
  bool fixed_tiles = false;        // tiles of 16 images at every batch instead of adaptive tiles
};

// The tensor-core general path (engine/custom/tc_general/: fp16 / bf16 graphs of conv2d, pool, add,
// concat and dense layers outside the tensor-core chain's family).
struct TcGeneralOptions {
  // False: such models run the per-node tensor-core path (tc_gemm.hpp) instead.
  bool enabled = true;
  // True: the path also takes conv2d, pool, add and concat nodes (implicit GEMMs on NHWC pixels);
  // false: only dense chains.
  bool convolutions = true;
  // Every GEMM on this block tile (an index of tcg::kTcgTiles) instead of the one chosen per layer
  // and batch; the bits are the same (tests check it).
  std::optional<int> tile;
};

// The general fp32 path (engine/custom/general/): every fp32 graph the fused chain does not take.
struct GeneralOptions {
  // For a graph the fused chain can take: true, the general path; false, the fused chain; nullopt,
  // the planner's rule (custom_backend.cpp: from the model's shapes, never the batch).
  std::optional<bool> over_fused_chain;
  // Every conv2d/dense kernel on this block tile (an index of general::GemmTile) instead of the one
  // the planner picks per layer and batch; the bits are the same (tests check it).
  std::optional<int> tile;
  // Layers whose K is cut into chunks run them on separate blocks (true) or in one thread (false)
  // at every batch, instead of the planner's per-batch choice; the bits are the same (tests check it).
  std::optional<bool> chunks_on_blocks;
  // The K chunk rule (general::plan_gemm_chunks): the fewest steps of 8 values of k in a chunk, and
  // the blocks a batch of 1 should get; nullopt: general::kMinChunkTiles, kChunkTargetBlocks.
  // Constants of the compiled plan, so the bits still depend on no batch.
  std::optional<int> min_chunk_steps;
  std::optional<int> chunk_target_blocks;
  // Dense layers copy rows of their input 16 bytes at a time into shared memory (where K is a
  // multiple of 4 and the rows are 16-byte aligned) instead of 4; the bits are the same (tests check it).
  bool dense_row_copies = false;
};

struct CustomOptions {
  // A reduced precision (int8, fp16, bf16). Fastest: a permission, as on the cudnn backend: the model
  // is compiled at each precision it allows (int8 also fp16 and fp32, fp16 / bf16 also fp32), one
  // forward pass of each timed at max_batch, the fastest kept, the plan's second line saying which
  // and the times. AsAsked: exactly the precision asked (tests of a precision's own kernels).
  gpu::PrecisionChoice precision_choice = gpu::PrecisionChoice::Fastest;
  ImageChainOptions image;
  TcChainOptions tc;
  TcGeneralOptions tc_general;
  GeneralOptions general;
};

}  // namespace engine::custom

#include "engine/custom/general/conv_gemm.hpp"

#include <algorithm>
#include <string>

#include "engine/custom/general/conv_gemm_kernel.cuh"

namespace engine::custom::general {
namespace kernel {

void launch_whole(const GemmArgs& a, GemmTile tile, int64_t M, cudaStream_t stream, const std::string& context) {
  launch_tile<Mode::Whole>(a, tile, {}, M, stream, context);
}

}  // namespace kernel

GemmTileShape gemm_tile_shape(GemmTile t) {
  switch (t) {
    case GemmTile::T32x32: return {32, 32};
    case GemmTile::T64x16: return {64, 16};
    case GemmTile::T64x32: return {64, 32};
    case GemmTile::T64x64: return {64, 64};
    case GemmTile::T128x32: return {128, 32};
    case GemmTile::T128x64: return {128, 64};
    case GemmTile::T128x128: return {128, 128};
    case GemmTile::Count: break;
  }
  return {0, 0};
}

const char* gemm_tile_name(GemmTile t) {
  switch (t) {
    case GemmTile::T32x32: return "32x32";
    case GemmTile::T64x16: return "64x16";
    case GemmTile::T64x32: return "64x32";
    case GemmTile::T64x64: return "64x64";
    case GemmTile::T128x32: return "128x32";
    case GemmTile::T128x64: return "128x64";
    case GemmTile::T128x128: return "128x128";
    case GemmTile::Count: break;
  }
  return "?";
}

GemmTile choose_gemm_tile(int64_t rows, int cols, int multiprocessors) {
  GemmTile most = GemmTile::T32x32;
  int64_t most_blocks = -1;
  for (int t = int(GemmTile::Count) - 1; t >= 0; --t) {
    const GemmTileShape sh = gemm_tile_shape(GemmTile(t));
    const int64_t blocks = ((rows + sh.bm - 1) / sh.bm) * ((cols + sh.bn - 1) / sh.bn);
    const double useful = double(rows) * cols / (double(blocks) * sh.bm * sh.bn);
    if (blocks >= multiprocessors && useful >= 0.75) return GemmTile(t);
    if (useful >= 0.5 && blocks > most_blocks) most = GemmTile(t), most_blocks = blocks;
  }
  return most;
}

int64_t gemm_rows(const GemmShape& s, bool pooled, int n) {
  if (pooled) return int64_t(n) * 4 * (s.out_height / 2) * (s.out_width / 2);
  return int64_t(n) * s.out_height * s.out_width;
}

GemmChunks plan_gemm_chunks(const GemmShape& s, bool pooled, const ChunkRule& rule) {
  const int64_t ktiles = (s.k() + kGemmBk - 1) / kGemmBk;
  const int64_t blocks = ((gemm_rows(s, pooled, 1) + 31) / 32) * ((s.out_channels + 31) / 32);
  const int64_t wanted = (std::max(rule.target_blocks, 1) + blocks - 1) / blocks;
  const int64_t count = std::clamp<int64_t>(std::min(wanted, ktiles / std::max(rule.min_tiles, 1)), 1, kMaxGemmChunks);
  GemmChunks c;
  c.tiles = int((ktiles + count - 1) / count);
  c.count = c.tiles > 0 ? int((ktiles + c.tiles - 1) / c.tiles) : 1;
  return c;
}

bool chunks_across_blocks(int64_t rows, int cols, int multiprocessors) {
  return ((rows + 31) / 32) * ((cols + 31) / 32) < multiprocessors;
}

void conv_gemm_forward(const GemmArgs& a, GemmTile tile, ChunkScratch scratch, int n, cudaStream_t stream,
                       const std::string& context) {
  const int64_t M = gemm_rows(a.shape, a.epilogue.pool_at >= 0, n);
  if (M <= 0) return;
  if (a.chunks.count <= 1)
    kernel::launch_whole(a, tile, M, stream, context);
  else if (scratch.partial == nullptr)
    kernel::launch_chunks(a, tile, M, stream, context);
  else
    kernel::launch_partial(a, tile, scratch, M, stream, context);
}

}  // namespace engine::custom::general

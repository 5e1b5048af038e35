#pragma once
// The loop the SIMD int8 products share (int8_gemm.hpp): c computed in micro-tiles of `blocks`
// column blocks by `rows` rows of a, each kept in registers over the whole of k by a kernel
// Kernel<NB, R>::run of the instruction set's file.
#include <cstddef>
#include <cstdint>

namespace engine::cpu::int8 {

using Tile = void (*)(const uint8_t* a, int kp, const uint8_t* w, size_t block_bytes, int32_t* c, int ldc);

// Kernel<NB, min(rows, MaxR)>::run.
template <template <int, int> class Kernel, int NB, int MaxR>
Tile tile_for(int rows) {
  if constexpr (MaxR == 1) {
    return Kernel<NB, 1>::run;
  } else {
    return rows >= MaxR ? Kernel<NB, MaxR>::run : tile_for<Kernel, NB, MaxR - 1>(rows);
  }
}

struct TileChoice {
  Tile tile;
  int blocks, rows;
};

// pick(blocks_left, rows_left) gives the micro-tile; its `blocks` must depend on blocks_left only.
template <class Pick>
void for_each_tile(const uint8_t* a, int m, int kp, const uint8_t* packed, int blocks, int block_cols,
                   size_t block_bytes, int32_t* c, int ldc, Pick pick) {
  for (int b = 0; b < blocks;) {
    int step = 1;
    for (int i = 0; i < m;) {
      const TileChoice t = pick(blocks - b, m - i);
      t.tile(a + size_t(i) * kp, kp, packed + size_t(b) * block_bytes, block_bytes, c + size_t(i) * ldc + b * block_cols,
             ldc);
      i += t.rows;
      step = t.blocks;
    }
    b += step;
  }
}

}  // namespace engine::cpu::int8

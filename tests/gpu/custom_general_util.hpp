#pragma once
// Shared by the general path's GPU tests (custom_general_test.cpp, custom_general_chunks_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/custom/custom_backend.hpp"
#include "engine/custom/general/conv_gemm.hpp"
#include "tests/common/compare.hpp"

namespace custom_general_test {

// The custom backend on the general path, optionally on one tile, with the K chunks forced on
// blocks or in one thread, and with K chunks of at least `min_chunk_steps` steps aiming at
// `chunk_target_blocks` blocks at batch 1.
inline std::unique_ptr<engine::Backend> general_backend(std::optional<int> tile = std::nullopt,
                                                        std::optional<bool> on_blocks = std::nullopt,
                                                        std::optional<int> min_chunk_steps = std::nullopt,
                                                        std::optional<int> chunk_target_blocks = std::nullopt) {
  engine::custom::CustomOptions options;
  options.general.over_fused_chain = true;
  options.general.tile = tile;
  options.general.chunks_on_blocks = on_blocks;
  options.general.min_chunk_steps = min_chunk_steps;
  options.general.chunk_target_blocks = chunk_target_blocks;
  return engine::custom::make_custom_backend(options);
}

// The same `total` random images give the same bits in batches of 1 (the first `ones` images), 7
// and 64 (each compiled for its own capacity, so tiles and chunk spreading differ) as in one batch.
inline void expect_same_bits_across_splits(const std::shared_ptr<formats::Model>& model, int total, int ones,
                                           uint32_t seed) {
  auto backend = general_backend();
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const auto input = testing_support::random_floats(per_sample * size_t(total), seed);
  const auto whole = testing_support::run_backend(model, *backend, input.data(), total, total);
  for (int cap : {1, 7, 64}) {
    const int covered = cap == 1 ? ones : total;
    for (int start = 0; start < covered; start += cap) {
      const int n = std::min(cap, covered - start);
      const auto part = testing_support::run_backend(model, *backend, input.data() + size_t(start) * per_sample, n, cap);
      for (size_t o = 0; o < whole.size(); ++o) {
        const size_t out_per_sample = whole[o].size() / size_t(total);
        ASSERT_EQ(std::memcmp(part[o].data(), whole[o].data() + size_t(start) * out_per_sample,
                              size_t(n) * out_per_sample * sizeof(float)),
                  0)
            << "output " << o << ", samples " << start << ".." << start + n - 1 << " with capacity " << cap;
      }
    }
  }
}

// `batch` random images give the planner's bits on every tile, with each K-chunk spreading of
// `spreads` (nullopt: the planner's; true: on blocks; false: in one thread), with one K chunk rule
// (general_backend) throughout.
inline void expect_every_tile_gives_the_planned_bits(const std::shared_ptr<formats::Model>& model, int batch,
                                                     uint32_t seed, const std::vector<std::optional<bool>>& spreads,
                                                     std::optional<int> min_chunk_steps = std::nullopt,
                                                     std::optional<int> chunk_target_blocks = std::nullopt) {
  namespace general = engine::custom::general;
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const auto input = testing_support::random_floats(per_sample * size_t(batch), seed);
  const auto planned = testing_support::run_backend(model, *general_backend(std::nullopt, std::nullopt, min_chunk_steps, chunk_target_blocks),
                                                    input.data(), batch, batch);
  for (const std::optional<bool>& spread : spreads)
    for (int t = 0; t < int(general::GemmTile::Count); ++t) {
      const auto forced = testing_support::run_backend(model, *general_backend(t, spread, min_chunk_steps, chunk_target_blocks),
                                                       input.data(), batch, batch);
      for (size_t o = 0; o < planned.size(); ++o)
        EXPECT_EQ(testing_support::first_bit_difference(forced[o], planned[o]), planned[o].size())
            << "batch " << batch << ", tile " << general::gemm_tile_name(general::GemmTile(t))
            << (!spread ? "" : *spread ? ", chunks on blocks" : ", chunks in one thread") << ", output " << o;
    }
}

}  // namespace custom_general_test

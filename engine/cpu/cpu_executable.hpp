#pragma once
// A Graph compiled for the fast cpu backend: a flat program of steps (activations fused into the
// conv or dense before them, flatten as aliases), dense weights packed, and per-thread buffers, all
// made here once; run() allocates nothing.
//
// A batch is cut into tiles of `lanes` images (16 with AVX-512, 8 with AVX2) that travel through
// the whole network together, one image per SIMD lane, in a per-thread arena that stays in L2
// (LeNet-5: 459 KiB with AVX-512); the last few images of a batch that do not fill half a tile go
// through the single-image path, which does the same arithmetic per element (kernels.hpp). Tiles
// and images are handed to the threads one at a time (tile_pool.hpp); every image's result is the
// same whatever its tile, thread or batch.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "engine/cpu/program.hpp"
#include "engine/cpu/tile_pool.hpp"

namespace engine::cpu {

class CpuExecutable : public Executable, public StagedExecution {
 public:
  CpuExecutable(const Graph& graph, const CompileOptions& options, const KernelSet& kernels,
                CpuOptions::Schedule schedule = CpuOptions::Schedule::Auto);

  int max_batch() const override { return max_batch_; }
  void run(const void* input, int n, std::span<float* const> outputs) override;
  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override;

  // Staged execution (engine bench), as the reference does it: all synchronous on the host.
  StagedExecution* staged_execution() override { return this; }
  void stage_input(const void* input, int n) override;
  void compute(int n) override;
  void fetch_outputs(int /*n*/) override {}
  const float* staged_output(size_t i) const override;

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  struct ThreadBuffers {
    float* tile = nullptr;    // arena_floats * lanes (+ slack)
    float* single = nullptr;  // group_ arenas of single_stride_ floats (arena_floats + slack)
    float* scratch = nullptr;  // padded conv inputs
    float* stage = nullptr;    // a tile's inputs, one image per row, before they go to the lanes
  };

  void run_tile(const void* input, int first, int count, std::span<float* const> outputs, const ThreadBuffers& b) const;
  void run_one(const void* input, int s, std::span<float* const> outputs, const ThreadBuffers& b) const;
  void run_images(const void* input, int first, int count, std::span<float* const> outputs,
                  const ThreadBuffers& b) const;
  void load_input(const void* input, int s, float* x) const;
  // Fuses a 2x2 stride-2 unpadded max pool that is the only reader of conv step s's value
  // (`out_value`, after its activation) into the conv (KStep::pool2): s and out_value then describe
  // the pooled output and the pool node is marked in `fused`. False, nothing changed, otherwise.
  bool fuse_pool2(KStep& s, int& out_value, std::vector<bool>& fused) const;
  // Fuses the add that is the only reader of conv step s's value (node `node`, no activation of its
  // own), and an activation that is the add's only reader, into the conv (KStep::add_in1), where
  // the add's other value exists before the conv runs: `in1` becomes that value.
  bool fuse_add(KStep& s, int node, int& out_value, int& in1, std::vector<bool>& fused) const;

  Graph graph_;
  const KernelSet& kernels_;
  int max_batch_ = 0;
  int threads_ = 1;
  int min_tile_images_ = 1;  // a partial tile with fewer images goes through the single-image path
  // Multiply-adds per image (conv and dense), and the fewest per thread worth waking a thread for.
  int64_t macs_per_image_ = 0;
  static constexpr int64_t kMinMacsPerThread = 250'000;
  int threads_for(int n) const;  // threads for a batch of n: at most threads_, one per useful share
  // Whether a batch of n, `tiles` tiles on `threads` threads, finishes sooner as single images.
  bool singles_finish_first(int n, int tiles, int threads) const;
  bool images_ = false;      // one image at a time (Schedule::Images, or Auto beyond L2), else tiles
  int group_ = 1;            // images per group (Images): as many dense inputs, and arenas, as fit half of L2
  int64_t single_stride_ = 0;
  std::vector<KStep> steps_;
  std::vector<std::vector<float>> packed_;  // dense weights and biases (KStep points into them)
  std::vector<std::vector<int32_t>> tap_offsets_;  // conv input offsets per tap (KStep::tap_offsets)
  Program program_;
  Preprocess pre_;  // uint8 input only
  int64_t raw_sample_elements_ = 0;
  int64_t arena_floats_ = 0;  // per sample, as the steps lay it out (cpu_executable.cpp, place())
  int64_t input_offset_ = 0;
  std::vector<int64_t> output_offsets_, output_elements_;
  std::unique_ptr<float[], FreeDeleter> buffers_;
  std::vector<ThreadBuffers> per_thread_;
  std::unique_ptr<TilePool> pool_;  // threads_ - 1 workers; the caller is thread 0
  std::string summary_;
  const void* staged_input_ = nullptr;
  std::vector<std::vector<float>> staged_outputs_;
  std::vector<float*> staged_pointers_;
};

}  // namespace engine::cpu

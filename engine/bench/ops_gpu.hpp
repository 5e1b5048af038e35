#pragma once
// The GPU side of `engine bench ops`: n x n float32 matrices on the device, the custom backend's
// Part 1 kernels (engine/custom/matrix_ops.hpp) with any launch shape, and cuBLAS, timed with CUDA
// events, with or without the host <-> device transfers. Built only with CUDA (ops_bench.cpp asks
// gpu_ops_available() first).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/bench/common.hpp"

namespace engine::bench {

struct Launch3 {
  unsigned x = 1, y = 1, z = 1;
};

struct GpuOpRun {
  Stats ms;
  int iterations = 0;
  std::vector<float> c;  // the result, copied back once after timing
};

class GpuOps {
 public:
  virtual ~GpuOps() = default;
  // Uploads a and b (n x n, row-major) for `op` ("add" or "matmul").
  virtual void prepare(const std::string& op, int n, const float* a, const float* b) = 0;
  // impl: "naive" (grid and block as given: rows over blocks, columns over threads), "tiled" (grid
  // 0 x 0: the covering grid), "cublas". With `transfers`, each run also copies a and b from
  // pinned host memory and c back. The output is poisoned (NaN) before the warm-up run.
  virtual GpuOpRun time(const std::string& impl, Launch3 grid, Launch3 block, bool transfers, double min_ms,
                        int min_iterations) = 0;
  virtual int multiprocessors() const = 0;
  // The covering grid the tiled kernel uses for this op and n.
  virtual Launch3 tiled_grid() const = 0;
  virtual Launch3 tiled_block() const = 0;
};

// nullopt when the GPU part can run; otherwise why not.
std::optional<std::string> gpu_ops_unavailable();
std::unique_ptr<GpuOps> make_gpu_ops();

}  // namespace engine::bench

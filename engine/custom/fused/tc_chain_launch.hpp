#pragma once
// Launchers of the tensor-core chain (tc_chain.cu): which kernel, its shared memory, the launch.
#include <cuda_runtime_api.h>

#include "engine/custom/fused/tc_chain_params.hpp"

namespace engine::custom::tc {

struct TcKernelChoice {
  bool bf16 = false;      // operands bf16 (else fp16)
  bool fast_tanh = true;  // tanh.approx.f32 (else the accurate tanhf)
  int version = 2;        // 1: one warp per tile (the simple one), 2: pairs of warps, two m-tiles at a time
  int signature = kSigGeneric;  // version 2: activations and pools fixed at compile time (tc_chain_params.hpp)
  bool adaptive_tile = true;    // version 2: tiles of fewer than 16 images when the batch leaves pairs idle
};

int tc_chain_threads(const TcKernelChoice& c);
int tc_chain_smem_bytes(const TcKernelChoice& c);
// Images per tile for a batch of n on `blocks` blocks: 16, or (version 2) as many as spread the
// batch over every pair of warps, even, at least 2.
int tc_chain_tile_images(const TcKernelChoice& c, int n, int blocks);
// Sets the kernel's shared-memory limit; returns how many blocks an SM holds (0: none fits).
int tc_chain_prepare(const TcKernelChoice& c, const char* context);
// y [n][p.units] from x [n][32][32] (the preprocessed input), on `stream`; `blocks` persistent blocks
// at most.
void tc_chain_forward(const TcKernelChoice& c, const TcChainParams& p, const float* x, float* y, int n, int blocks,
                      cudaStream_t stream, const char* context);
// The int8 chain (c.bf16 and c.version unused: one version, kQPairs pairs of warps, kQSmemBytes).
int tc_int8_prepare(const TcKernelChoice& c, const char* context);
void tc_int8_forward(const TcKernelChoice& c, const TcInt8Params& p, const float* x, float* y, int n, int blocks,
                     cudaStream_t stream, const char* context);

}  // namespace engine::custom::tc

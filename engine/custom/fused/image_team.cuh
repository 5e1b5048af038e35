#pragma once
// The blocks that share one image in the image chain (image_chain.cu), and how a layer's outputs
// reach all of them: a Team (one block, or a thread-block cluster), plain stores into every block's
// shared memory followed by a cluster barrier, or asynchronous stores that complete on a per-layer
// mbarrier in each receiver (the hand-offs). Included by image_chain.cu only (it owns the
// shared-memory mbarriers declared here).
#include <cooperative_groups.h>

#include "engine/custom/fused/conv_layers.cuh"
#include "engine/custom/fused/fused_layers.hpp"

namespace engine::custom::fused {
namespace {

namespace cg = cooperative_groups;

// Thread-block clusters exist from sm_90 (Hopper). Below it, the cluster instance compiles as a
// one-block team and is never launched with clusters (image_chain_max_cluster answers 1).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ENGINE_IMAGE_CHAIN_CLUSTERS 1
#else
#define ENGINE_IMAGE_CHAIN_CLUSTERS 0
#endif

// The blocks that share one image: one block, or (batches of a few images) a thread-block cluster
// whose blocks split every layer's outputs and store each output into every block's shared memory
// (distributed shared memory), so each block holds the whole activation for the next layer. An
// output is still computed by one thread in the same order: the bits do not depend on the split.
template <bool kCluster>
struct Team {
  int rank = 0, size = 1;
  __device__ Team() {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
    if constexpr (kCluster) {
      rank = int(cg::this_cluster().block_rank());
      size = int(cg::this_cluster().num_blocks());
    }
#endif
  }
  __device__ __forceinline__ void sync() const {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
    if constexpr (kCluster) {
      cg::this_cluster().sync();
      return;
    }
#endif
    __syncthreads();
  }
};

struct ClusterStore {
  int size;
  __device__ __forceinline__ void operator()(float* p, float v) const {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
    cg::cluster_group cluster = cg::this_cluster();
    for (int r = 0; r < size; ++r) *cluster.map_shared_rank(p, r) = v;
#else
    *p = v;
#endif
  }
};

// The hand-off between layers in a cluster: a block stores each
// output into every block's shared memory with st.async, which counts its bytes on that block's
// mbarrier for the layer; a block waits on its own mbarrier until the layer's whole output (every
// element, from whichever block computed it) has landed. This replaces a cluster barrier per
// layer, whose release compiles to a GPU-scope fence (MEMBAR.ALL.GPU; dev/probes/batch1_floor.cu
// times it); st.async needs no fence, and the wait's acquire is an L1
// invalidation. Phases: one per image (parity = the image's count & 1); the block's last warp
// initialises the mbarriers and, once an image's opening barrier has passed, arms each with the
// bytes the block will receive (image_chain.cu).
// Why no block can store into a buffer another block still reads: a block computes layer l + 1
// only after all of layer l has arrived, i.e. after every block finished computing layer l, and
// the buffers alternate between two regions (layer l + 1 writes layer l's input region).
__shared__ __align__(8) unsigned long long s_handoff[kMaxSpatialLayers + kMaxDenseLayers];

__device__ __forceinline__ unsigned smem_addr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void handoff_init(int count) {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
  for (int i = 0; i < count; ++i)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&s_handoff[i])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the cluster's st.async
#endif
}

// This block will receive `bytes` into hand-off `i` in the current phase.
__device__ __forceinline__ void handoff_arm(int i, int bytes) {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&s_handoff[i])), "r"(bytes)
               : "memory");
#endif
}

// Until hand-off `i` completes the phase of the given parity. A plan whose byte count were wrong
// would wait forever: past ~2^28 polls (seconds) the kernel traps, and the launch fails with an error.
__device__ __forceinline__ void handoff_wait(int i, unsigned parity) {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
  const unsigned bar = smem_addr(&s_handoff[i]);
  for (unsigned polls = 0;; ++polls) {
    unsigned done;
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    if (polls > (1u << 28)) __trap();
  }
#endif
}

// The bytes one block receives from a layer: each output element once, from the block that
// computed it (conv_layers.cuh stores every element of the output's interior exactly once; a dense
// layer stores all its padded units).
__device__ __forceinline__ int spatial_bytes(const SpatialLayer& L) { return L.out.channels * L.out.height * L.out.width * 4; }

// Arms every hand-off of one image (the keeper thread, once per image).
// The last dense layer has no hand-off: the team's first block computes all of it (see dense_part).
// With the dense tail (`tail_runs` blocks: ImageChainParams::tail_runs) the layer before it hands block 0 the
// other runs' partials of the last layer (units_padded floats each) and the other blocks nothing
// (armed with no bytes: the phase completes at once).
__device__ __forceinline__ void handoff_arm_all(const ImageChainParams& p, int tail_runs, int rank) {
  const int conv_layers = p.has_conv ? p.conv.layer_count : 0;
  for (int l = 0; l < conv_layers; ++l)
    if (!p.conv.layers[l].out.zero_fill) handoff_arm(l, spatial_bytes(p.conv.layers[l]));
  if (p.has_dense)
    for (int l = 0; l + 1 < p.dense.layer_count; ++l) {
      if (tail_runs > 0 && l + 2 == p.dense.layer_count)
        handoff_arm(conv_layers + l, rank == 0 ? (tail_runs - 1) * p.dense.layers[l + 1].units_padded * 4 : 0);
      else
        handoff_arm(conv_layers + l, p.dense.layers[l].units_padded * 4);
    }
}

// A cluster barrier in two halves without fences (arrive.relaxed): at the end of an async launch it
// only keeps a block from exiting before every block has received all it waits for, i.e. before
// every st.async of this block has landed.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// One float into block `rank`'s shared memory at the offset of `a` (a shared address here), counted
// on that block's mbarrier at the offset of `bar`.
__device__ __forceinline__ void async_store_to(int rank, unsigned a, float v, unsigned bar) {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
  unsigned ra, rb;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(bar), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(ra),
               "r"(__float_as_uint(v)), "r"(rb)
               : "memory");
#endif
}

struct AsyncClusterStore {
  int size;
  unsigned bar;  // this layer's mbarrier (the same offset in every block)
  __device__ __forceinline__ void operator()(float* p, float v) const {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
    const unsigned a = smem_addr(p);
    for (int r = 0; r < size; ++r) async_store_to(r, a, v, bar);
#else
    *p = v;
#endif
  }
};


template <bool kCluster>
__device__ auto team_store(const Team<kCluster>& team) {
  if constexpr (kCluster) return ClusterStore{team.size};
  else return LocalStore{};
}

}  // namespace
}  // namespace engine::custom::fused

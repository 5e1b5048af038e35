// The image chain: the whole fused chain (conv part, then dense part, then softmax) for one image
// per block, for batches too small to fill the GPU with the tiled kernels (conv_chain.cu,
// dense_chain.cu). docs/perf-fused-gpu.md has the prediction and the measurements.
//
// Why a third kernel: at batch 1 the tiled kernels give one block the whole image with work items
// sized for throughput (LeNet-5's c3: 60 items of 4,800 FMAs, two warps busy) and stream the first
// dense layer's 192 KB of weights from L2 through 30 threads; 100 us per forward. Here:
//  - conv work items are 2 output channels x 2 rows (K*_2 / Generic2 variants; c3: 400 items over
//    512 threads);
//  - the conv part hands its output to the dense part in shared memory (one kernel, not two);
//  - each dense layer's transposed weights are staged through shared memory in slices with
//    cp.async, two slices in turn, and the first slice is requested before the conv part starts, so
//    its latency hides behind the convolutions.
// Every output is summed in the tiled kernels' order (conv_layers.cuh; dense: bias, then k
// ascending over the zero-padded rows, one fmaf per step), and the same activation and softmax
// functions run, so an image's outputs have the same bits whichever kernel computed them; the
// bitwise batch-split tests (tests/gpu/custom_fused_test.cpp) check that across the two paths.
#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include "engine/custom/fused/conv_layers.cuh"
#include "engine/custom/fused/fused_layers.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::fused {
namespace {

namespace cg = cooperative_groups;

// Phase timing for the batch-1 study (docs/perf-fused-gpu.md, "Session 8"): built with
// -DENGINE_IMAGE_CHAIN_TRACE=1, block 0 stamps %globaltimer after every phase of its first image and
// prints the stamps of its 2,000th launch (a warm one); off by default, and then it compiles to nothing.
#if ENGINE_IMAGE_CHAIN_TRACE
__device__ unsigned g_trace_launches = 0;
__shared__ unsigned long long s_trace[24], s_trace_clock[24];
__shared__ int s_trace_count;
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
#define TRACE_STAMP()                                                                              \
  do {                                                                                             \
    if (threadIdx.x == 0 && blockIdx.x == 0 && s_trace_count < 24) { s_trace_clock[s_trace_count] = clock64(); s_trace[s_trace_count++] = global_ns(); } \
  } while (0)
#else
#define TRACE_STAMP() \
  do {                \
  } while (0)
#endif

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

// The hand-off between layers in a cluster (ImageChainParams::handoff_async): a block stores each
// output into every block's shared memory with st.async, which counts its bytes on that block's
// mbarrier for the layer; a block waits on its own mbarrier until the layer's whole output (every
// element, from whichever block computed it) has landed. This replaces a cluster barrier per
// layer, whose release compiles to a GPU-scope fence (MEMBAR.ALL.GPU) and cost 0.7 us on the H100
// (tools/probes/batch1_floor.cu); st.async needs no fence, and the wait's acquire is an L1
// invalidation. Phases: one per image (parity = the image's count & 1); thread 0 arms every
// layer's mbarrier with the bytes it will receive before the cluster barrier that opens an image.
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

struct AsyncClusterStore {
  int size;
  unsigned bar;  // this layer's mbarrier (the same offset in every block)
  __device__ __forceinline__ void operator()(float* p, float v) const {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
    const unsigned a = smem_addr(p);
    for (int r = 0; r < size; ++r) {
      unsigned ra, rb;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(r));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(bar), "r"(r));
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(ra),
                   "r"(__float_as_uint(v)), "r"(rb)
                   : "memory");
    }
#else
    *p = v;
#endif
  }
};

// The bytes one block receives from a layer: each output element once, from the block that
// computed it (conv_layers.cuh stores every element of the output's interior exactly once; a dense
// layer stores all its padded units).
__device__ __forceinline__ int spatial_bytes(const SpatialLayer& L) { return L.out.channels * L.out.height * L.out.width * 4; }

template <bool kCluster>
__device__ auto team_store(const Team<kCluster>& team) {
  if constexpr (kCluster) return ClusterStore{team.size};
  else return LocalStore{};
}

template <bool kCluster, class Store>
__device__ void run_conv_image(const SpatialLayer& L, const float* staged, float* smem, const Team<kCluster>& team,
                               Store st) {
  switch (L.variant) {
    case ConvVariant::K2_2: conv_tiled<2, kImageOcb, kImageRowsPerThread>(L, staged, smem, 1, st, team.rank, team.size); break;
    case ConvVariant::K3_2: conv_tiled<3, kImageOcb, kImageRowsPerThread>(L, staged, smem, 1, st, team.rank, team.size); break;
    case ConvVariant::K5_2: conv_tiled<5, kImageOcb, kImageRowsPerThread>(L, staged, smem, 1, st, team.rank, team.size); break;
    default: conv_generic<kImageOcb>(L, staged, smem, 1, st, team.rank, team.size); break;  // Generic2 (the plan uses no other)
  }
}

// This block's units of a dense layer, [u0, u1) (multiples of 4), and how many rows of its
// weight columns one staged slice holds. Computed for every layer once per launch, in parallel, into
// s_share (the divisions sat on the batch-1 critical path when each layer worked them out in turn).
struct DenseShare {
  int u0, u1, cols, slice_rows, slices;
  DenseShare() = default;
  __device__ DenseShare(const DenseLayer& D, int rank, int size) {
    const WorkRange<ClusterStore> r(D.units_padded, 4, rank, size);
    u0 = r.lo;
    u1 = r.hi;
    cols = u1 - u0;
    slice_rows = cols > 0 ? min(D.in_padded, kImageSliceFloats / cols) : D.in_padded;
    slices = (D.in_padded + slice_rows - 1) / slice_rows;
  }
};
__shared__ DenseShare s_share[kMaxDenseLayers];

// Requests slice `slice` of this block's weight columns of a dense layer into `dst` ([rows][cols],
// 16-byte copies by the whole block); the caller commits the group.
__device__ __forceinline__ void request_slice(const DenseLayer& D, const DenseShare& sh, int slice, float* dst) {
  const int r0 = slice * sh.slice_rows;
  const int rows = min(sh.slice_rows, D.in_padded - r0);
  const int quads = sh.cols / 4;  // cols is a multiple of 4, as units_padded is
  if (quads == 0) return;
  if (sh.cols == D.units_padded) {  // one block per image: whole rows, one contiguous run
    const float* src = D.weight_t + size_t(r0) * D.units_padded;
    for (int i = threadIdx.x * 4; i < rows * sh.cols; i += blockDim.x * 4) __pipeline_memcpy_async(dst + i, src + i, 16);
    return;
  }
  for (int i = threadIdx.x; i < rows * quads; i += blockDim.x) {
    const int row = i / quads, q = i - row * quads;
    __pipeline_memcpy_async(dst + row * sh.cols + 4 * q, D.weight_t + size_t(r0 + row) * D.units_padded + sh.u0 + 4 * q,
                            16);
  }
}

// s + sum over r of a[r] * w[r * stride], one fmaf per step, r ascending (the tiled kernels' order,
// so the same bits), with the shared-memory loads of the next 8 steps issued before the FMAs of
// these 8: a unit's 400-step chain (f5) is the batch-1 forward's longest, and without the prefetch
// each group of 8 waited one shared-memory latency on top of its FMA chain (Nsight Compute,
// docs/perf-fused-gpu.md "Session 6"). ENGINE_FUSED_IMAGE_DENSE=1 (fused_executable.cpp) keeps the
// plain loop for A/B.
template <bool kPipelined>
__device__ __forceinline__ float dense_chain(const float* a, const float* w, int stride, int rows, float s) {
  int r = 0;
  if constexpr (kPipelined) {
    if (rows >= 16) {
      float ca[8], cw[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        ca[i] = a[i];
        cw[i] = w[i * stride];
      }
      for (r = 8; r + 8 <= rows; r += 8) {
        float na[8], nw[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          na[i] = a[r + i];
          nw[i] = w[(r + i) * stride];
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) s = fmaf(ca[i], cw[i], s);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          ca[i] = na[i];
          cw[i] = nw[i];
        }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) s = fmaf(ca[i], cw[i], s);
    }
  }
#pragma unroll 8
  for (; r < rows; ++r) s = fmaf(a[r], w[r * stride], s);
  return s;
}

// Every dense layer of one image: its input row is at layers[0].in_off in every block of the team;
// slice 0 of layer 0 was requested into slice buffer 0 (and committed) before the call. Ends with a
// team barrier.
template <bool kCluster>
__device__ void dense_part(const ImageChainParams& p, float* smem, const Team<kCluster>& team, unsigned parity) {
  const DenseChainParams& dp = p.dense;
  float* acc = smem + p.acc_off;
  const int first_handoff = p.has_conv ? p.conv.layer_count : 0;
  int buf = 0;
  for (int l = 0; l < dp.layer_count; ++l) {
    const DenseLayer& D = dp.layers[l];
    const DenseShare sh = s_share[l];
    const unsigned epi = D.epilogue.code;
    const float* bias = smem + p.bias_off[l];
    const float* a = smem + D.in_off;
    for (int j = 0; j < sh.slices; ++j) {
      // The next slice (of this layer or the next) loads while this one is used.
      if (j + 1 < sh.slices) {
        request_slice(D, sh, j + 1, smem + p.slice_off[buf ^ 1]);
      } else if (l + 1 < dp.layer_count) {
        request_slice(dp.layers[l + 1], s_share[l + 1], 0, smem + p.slice_off[buf ^ 1]);
      }
      __pipeline_commit();
      __pipeline_wait_prior(1);  // every group but the newest: this slice has landed
      __syncthreads();
      const int r0 = j * sh.slice_rows;
      const int rows = min(sh.slice_rows, D.in_padded - r0);
      const float* w = smem + p.slice_off[buf] - sh.u0;
      for (int u = sh.u0 + int(threadIdx.x); u < sh.u1; u += blockDim.x) {
        float s = j == 0 ? bias[u] : acc[u];
        s = p.dense_pipelined ? dense_chain<true>(a + r0, w + u, sh.cols, rows, s)
                              : dense_chain<false>(a + r0, w + u, sh.cols, rows, s);
        if (j + 1 < sh.slices) {
          acc[u] = s;
        } else {
          const float v = u < D.units ? apply_epilogue(s, epi) : 0.0f;
          if (kCluster && p.handoff_async) AsyncClusterStore{team.size, smem_addr(&s_handoff[first_handoff + l])}(&smem[D.out_off + u], v);
          else team_store(team)(&smem[D.out_off + u], v);
        }
      }
      __syncthreads();  // the slice buffer is requested again two slices on
      buf ^= 1;
    }
    // The layer's outputs, from every block, are in place.
    if (kCluster && p.handoff_async) handoff_wait(first_handoff + l, parity);
    else team.sync();
    TRACE_STAMP();
  }
}

template <bool kCluster>
__global__ void __launch_bounds__(kImageThreads)
    image_chain_kernel(const __grid_constant__ ImageChainParams p, const float* __restrict__ conv_weights,
                       const float* __restrict__ x, float* __restrict__ y, int n) {
  extern __shared__ __align__(16) float smem[];
#if ENGINE_IMAGE_CHAIN_TRACE
  if (threadIdx.x == 0) s_trace_count = 0;
#endif
  TRACE_STAMP();
  const Team<kCluster> team;
  const auto st = team_store(team);
  const ConvChainParams& cp = p.conv;
  const DenseChainParams& dp = p.dense;
  const bool async = kCluster && p.handoff_async;
  const int conv_layers = p.has_conv ? cp.layer_count : 0;
  const int dense_layers = p.has_dense ? dp.layer_count : 0;
  if (async && threadIdx.x == 0) handoff_init(conv_layers + dense_layers);
  if (int(threadIdx.x) < dense_layers) s_share[threadIdx.x] = DenseShare(dp.layers[threadIdx.x], team.rank, team.size);
  // Conv weights and biases, and the dense biases, staged once for every image this block runs
  // (their own group).
  if (p.has_conv)
    for (int i = threadIdx.x * 4; i < cp.weight_floats; i += blockDim.x * 4)
      __pipeline_memcpy_async(smem + i, conv_weights + i, 16);
  for (int l = 0; l < dense_layers; ++l)
    for (int i = threadIdx.x * 4; i < dp.layers[l].units_padded; i += blockDim.x * 4)
      __pipeline_memcpy_async(smem + p.bias_off[l] + i, dp.layers[l].bias + i, 16);
  __pipeline_commit();
  __syncthreads();  // s_share
  const int in_elements = cp.input_channels * cp.input_height * cp.input_width;
  const DenseLayer& first = dp.layers[0];
  const int teams = gridDim.x / team.size;
  unsigned parity = 0;
  bool arrived = false;  // async: this block's half of the closing cluster barrier
  for (int img = blockIdx.x / team.size; img < n; img += teams, parity ^= 1) {
    if (p.has_dense) request_slice(first, s_share[0], 0, smem + p.slice_off[0]);
    __pipeline_commit();
    // Every hand-off this image will use, armed before the barrier that lets other blocks store.
    if (async && threadIdx.x == 0) {
      for (int l = 0; l < conv_layers; ++l)
        if (!cp.layers[l].out.zero_fill) handoff_arm(l, spatial_bytes(cp.layers[l]));
      for (int l = 0; l < dense_layers; ++l) handoff_arm(conv_layers + l, dp.layers[l].units_padded * 4);
    }
    if (p.has_conv) {
      // Every block of the team loads the input and keeps the whole of every activation.
      load_input_tile(cp, x + size_t(img) * in_elements, 1, smem);
      TRACE_STAMP();
      __pipeline_wait_prior(1);  // the conv weights (the dense slice may still be in flight)
      team.sync();  // every block is past its previous image and has zeroed its padded input
      TRACE_STAMP();
      for (int l = 0; l < cp.layer_count; ++l) {
        const SpatialLayer& L = cp.layers[l];
        if (async && !L.out.zero_fill) {
          const AsyncClusterStore ast{team.size, smem_addr(&s_handoff[l])};
          if (L.op == SpatialOp::Conv) run_conv_image(L, smem, smem, team, ast);
          else pool_layer(L, smem, 1, ast, team.rank, team.size);
          TRACE_STAMP();
          handoff_wait(l, parity);
          TRACE_STAMP();
          continue;
        }
        // A buffer read padded is zeroed whole first; its layer hands off through cluster barriers.
        if (L.out.zero_fill) {
          zero_buffer(smem, L.out, 1);
          team.sync();  // zeros everywhere before any block stores into the buffer
        }
        if (L.op == SpatialOp::Conv) run_conv_image(L, smem, smem, team, st);
        else pool_layer(L, smem, 1, st, team.rank, team.size);
        TRACE_STAMP();
        team.sync();
        TRACE_STAMP();
      }
      if (async && !p.has_dense && img + teams >= n) {
        cluster_arrive_relaxed();  // every hand-off this block waits for has landed
        arrived = true;
      }
      if (p.has_dense) {
        store_chain_output(cp, smem, 1, smem + first.in_off, first.in_padded, dp.input_epilogue);
        for (int k = cp.output_elements + threadIdx.x; k < first.in_padded; k += blockDim.x) smem[first.in_off + k] = 0.0f;
      } else if (team.rank == 0) {
        store_chain_output(cp, smem, 1, y + size_t(img) * cp.output_elements, cp.output_elements, Epilogue{});
      }
    } else {
      const int F = dp.input_features;
      const float* src = x + size_t(img) * F;
      for (int k = threadIdx.x; k < first.in_padded; k += blockDim.x)
        smem[first.in_off + k] = k < F ? apply_epilogue(src[k], dp.input_epilogue) : 0.0f;
      team.sync();  // every block is past its previous image
    }
    __syncthreads();
    TRACE_STAMP();
    if (p.has_dense) {
      dense_part(p, smem, team, parity);
      if (async && img + teams >= n) {
        cluster_arrive_relaxed();  // every hand-off this block waits for has landed
        arrived = true;
      }
      const DenseLayer& last = dp.layers[dp.layer_count - 1];
      const int U = last.units;
      float* dst = y + size_t(img) * U;
      if (team.rank == 0) {
        if (dp.softmax) {
          if (threadIdx.x < 32) softmax_row_warp(smem + last.out_off, U, dst, threadIdx.x);
        } else {
          for (int u = threadIdx.x; u < U; u += blockDim.x) dst[u] = smem[last.out_off + u];
        }
      }
      __syncthreads();  // the next image overwrites the buffers
      TRACE_STAMP();
    }
  }
  __pipeline_wait_prior(0);  // nothing may be left in flight into shared memory at exit
  // And no block may exit while another can still store into it.
  if (async) {
    if (!arrived) cluster_arrive_relaxed();
    cluster_wait();
  } else {
    team.sync();
  }
#if ENGINE_IMAGE_CHAIN_TRACE
  TRACE_STAMP();
  if (threadIdx.x == 0 && blockIdx.x == 0 && atomicAdd(&g_trace_launches, 1u) == 2000u) {
    printf("image_chain trace (cluster %d, %d blocks, ns since entry):", kCluster ? team.size : 1, int(gridDim.x));
    for (int i = 1; i < s_trace_count; ++i) printf(" %llu", s_trace[i] - s_trace[0]);
    printf("\nimage_chain trace, SM cycles since entry:");
    for (int i = 1; i < s_trace_count; ++i) printf(" %llu", s_trace_clock[i] - s_trace_clock[0]);
    printf("\n");
  }
#endif
}

}  // namespace

void image_chain_prepare(int smem_bytes, const char* context) {
  CUDA_CHECK_CTX(cudaFuncSetAttribute(image_chain_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                 context);
  CUDA_CHECK_CTX(cudaFuncSetAttribute(image_chain_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                 context);
}

int image_chain_blocks_per_sm(int smem_bytes) {
  int blocks = 0;
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, image_chain_kernel<false>, kImageThreads, smem_bytes));
  return blocks;
}

int image_chain_max_cluster(int smem_bytes, int want) {
  for (int size = want; size > 1; size /= 2) {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(size);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.gridDim = dim3(unsigned(size));
    config.blockDim = dim3(kImageThreads);
    config.dynamicSmemBytes = size_t(smem_bytes);
    config.attrs = attr;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, image_chain_kernel<true>, &config) == cudaSuccess && clusters >= 1)
      return size;
    (void)cudaGetLastError();  // a size the device cannot schedule is an answer, not an error
  }
  return 1;
}

void image_chain_forward(const ImageChainParams& p, const float* conv_weights, const float* x, float* y, int n,
                         int blocks, int cluster, cudaStream_t stream, const char* context) {
  if (n <= 0) return;
  if (cluster <= 1) {
    const int grid = n < blocks ? n : blocks;
    image_chain_kernel<false><<<grid, kImageThreads, size_t(p.smem_floats) * sizeof(float), stream>>>(
        p, conv_weights, x, y, n);
    CUDA_CHECK_LAUNCH(context);
    return;
  }
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.gridDim = dim3(unsigned(n * cluster));
  config.blockDim = dim3(kImageThreads);
  config.dynamicSmemBytes = size_t(p.smem_floats) * sizeof(float);
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  CUDA_CHECK_CTX(cudaLaunchKernelEx(&config, image_chain_kernel<true>, p, conv_weights, x, y, n), context);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::fused

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

template <bool kCluster>
__device__ auto team_store(const Team<kCluster>& team) {
  if constexpr (kCluster) return ClusterStore{team.size};
  else return LocalStore{};
}

template <bool kCluster>
__device__ void run_conv_image(const SpatialLayer& L, const float* staged, float* smem, const Team<kCluster>& team) {
  const auto st = team_store(team);
  switch (L.variant) {
    case ConvVariant::K2_2: conv_tiled<2, kImageOcb, kImageRowsPerThread>(L, staged, smem, 1, st, team.rank, team.size); break;
    case ConvVariant::K3_2: conv_tiled<3, kImageOcb, kImageRowsPerThread>(L, staged, smem, 1, st, team.rank, team.size); break;
    case ConvVariant::K5_2: conv_tiled<5, kImageOcb, kImageRowsPerThread>(L, staged, smem, 1, st, team.rank, team.size); break;
    default: conv_generic<kImageOcb>(L, staged, smem, 1, st, team.rank, team.size); break;  // Generic2 (the plan uses no other)
  }
}

// This block's units of a dense layer, [u0, u1) (multiples of 4), and how many rows of its
// weight columns one staged slice holds.
struct DenseShare {
  int u0, u1, cols, slice_rows, slices;
  __device__ DenseShare(const DenseLayer& D, int rank, int size) {
    const WorkRange<ClusterStore> r(D.units_padded, 4, rank, size);
    u0 = r.lo;
    u1 = r.hi;
    cols = u1 - u0;
    slice_rows = cols > 0 ? min(D.in_padded, kImageSliceFloats / cols) : D.in_padded;
    slices = (D.in_padded + slice_rows - 1) / slice_rows;
  }
};

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
__device__ void dense_part(const ImageChainParams& p, float* smem, const Team<kCluster>& team) {
  const DenseChainParams& dp = p.dense;
  const auto st = team_store(team);
  float* acc = smem + p.acc_off;
  int buf = 0;
  for (int l = 0; l < dp.layer_count; ++l) {
    const DenseLayer& D = dp.layers[l];
    const DenseShare sh(D, team.rank, team.size);
    const unsigned epi = D.epilogue.code;
    const float* a = smem + D.in_off;
    for (int j = 0; j < sh.slices; ++j) {
      // The next slice (of this layer or the next) loads while this one is used.
      if (j + 1 < sh.slices) {
        request_slice(D, sh, j + 1, smem + p.slice_off[buf ^ 1]);
      } else if (l + 1 < dp.layer_count) {
        const DenseLayer& next = dp.layers[l + 1];
        request_slice(next, DenseShare(next, team.rank, team.size), 0, smem + p.slice_off[buf ^ 1]);
      }
      __pipeline_commit();
      __pipeline_wait_prior(1);  // every group but the newest: this slice has landed
      __syncthreads();
      const int r0 = j * sh.slice_rows;
      const int rows = min(sh.slice_rows, D.in_padded - r0);
      const float* w = smem + p.slice_off[buf] - sh.u0;
      for (int u = sh.u0 + int(threadIdx.x); u < sh.u1; u += blockDim.x) {
        float s = j == 0 ? __ldg(D.bias + u) : acc[u];
        s = p.dense_pipelined ? dense_chain<true>(a + r0, w + u, sh.cols, rows, s)
                              : dense_chain<false>(a + r0, w + u, sh.cols, rows, s);
        if (j + 1 < sh.slices) acc[u] = s;
        else st(&smem[D.out_off + u], u < D.units ? apply_epilogue(s, epi) : 0.0f);
      }
      __syncthreads();  // the slice buffer is requested again two slices on
      buf ^= 1;
    }
    team.sync();  // the layer's outputs, from every block, are in place
  }
}

template <bool kCluster>
__global__ void __launch_bounds__(kImageThreads)
    image_chain_kernel(const __grid_constant__ ImageChainParams p, const float* __restrict__ conv_weights,
                       const float* __restrict__ x, float* __restrict__ y, int n) {
  extern __shared__ __align__(16) float smem[];
  const Team<kCluster> team;
  const auto st = team_store(team);
  const ConvChainParams& cp = p.conv;
  const DenseChainParams& dp = p.dense;
  // Conv weights and biases, staged once for every image this block runs (their own group).
  if (p.has_conv)
    for (int i = threadIdx.x * 4; i < cp.weight_floats; i += blockDim.x * 4)
      __pipeline_memcpy_async(smem + i, conv_weights + i, 16);
  __pipeline_commit();
  const int in_elements = cp.input_channels * cp.input_height * cp.input_width;
  const DenseLayer& first = dp.layers[0];
  const int teams = gridDim.x / team.size;
  for (int img = blockIdx.x / team.size; img < n; img += teams) {
    if (p.has_dense) request_slice(first, DenseShare(first, team.rank, team.size), 0, smem + p.slice_off[0]);
    __pipeline_commit();
    if (p.has_conv) {
      // Every block of the team loads the input and keeps the whole of every activation.
      load_input_tile(cp, x + size_t(img) * in_elements, 1, smem);
      __pipeline_wait_prior(1);  // the conv weights (the dense slice may still be in flight)
      team.sync();  // every block is past its previous image and has zeroed its padded input
      for (int l = 0; l < cp.layer_count; ++l) {
        const SpatialLayer& L = cp.layers[l];
        if (L.out.zero_fill) {
          zero_buffer(smem, L.out, 1);
          team.sync();  // zeros everywhere before any block stores into the buffer
        }
        if (L.op == SpatialOp::Conv) run_conv_image(L, smem, smem, team);
        else pool_layer(L, smem, 1, st, team.rank, team.size);
        team.sync();
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
    if (p.has_dense) {
      dense_part(p, smem, team);
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
    }
  }
  __pipeline_wait_prior(0);  // nothing may be left in flight into shared memory at exit
  team.sync();               // and no block may exit while another can still store into it
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

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
//  - each dense layer's weights are staged through shared memory in slices with cp.async, two
//    slices in turn, the first one requested while the convolutions run.
// Batches of a few images spread each image over a cluster of up to 8 blocks (one per SM), each
// computing a share of every layer and sending it to every block of the cluster with st.async,
// which completes on a per-layer mbarrier in the receiver: no cluster barrier between layers
// (session 8: batch 1 from 23 to ~16 us, docs/perf-fused-gpu.md).
// Every output is summed in the tiled kernels' order (conv_layers.cuh; dense: the chunked order of
// DenseLayer::chunk_rows over the zero-padded rows, one fmaf per step within a chunk), and the same activation and softmax
// functions run, so an image's outputs have the same bits whichever kernel computed them; the
// bitwise batch-split tests (tests/gpu/custom_fused_test.cpp) check that across the two paths.
#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <cstdlib>

namespace engine::custom::fused {
namespace {
// Phase timing for the batch-1 study (docs/perf-fused-gpu.md, "Session 8"): built with
// -DENGINE_IMAGE_CHAIN_TRACE=1, block 0 stamps %globaltimer after every phase of its first image and
// prints the stamps of its 2,000th launch (a warm one); off by default, and then it compiles to nothing.
#if ENGINE_IMAGE_CHAIN_TRACE
__device__ unsigned g_trace_launches = 0;
// Every block's entry and exit (its first and last instruction's %globaltimer), per launch parity:
// the 2,001st launch prints the 2,000th's (session 11: two changes shortened block 0's own span
// and yet lengthened the forward, so the time that moved is outside it).
constexpr int kTraceBlocks = 64;
__device__ unsigned long long g_block_entry[2][kTraceBlocks], g_block_exit[2][kTraceBlocks];
__shared__ unsigned long long s_trace[64], s_trace_clock[64];
__shared__ int s_trace_count;
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
#define TRACE_STAMP()                                                                              \
  do {                                                                                             \
    if (threadIdx.x == 0 && blockIdx.x == 0 && s_trace_count < 64) { s_trace_clock[s_trace_count] = clock64(); s_trace[s_trace_count++] = global_ns(); } \
  } while (0)
// Session 15: the SM cycles of thread 0's dense sums alone (each chain call of block 0's thread 0),
// against tools/probes/solo_dense.cu's cycles for the same loop on its own. The sum is stored before
// the second clock read, so the read waits for the chain.
__shared__ long long s_chain_cycles[16];
__shared__ int s_chain_rows[16], s_chain_count;
__shared__ float s_chain_sink;
__device__ __forceinline__ long long chain_clock() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
// Session 17: two marks inside a chain call (its operands' parameters in registers, its first
// loads landed), each clock read waiting for the values it names, so the call's fixed cost splits.
__shared__ long long s_chain_mark[2], s_chain_marks[16][2];
#define CHAIN_MARK(i, fdep, idep)                                                                   \
  do {                                                                                              \
    if (threadIdx.x == 0 && blockIdx.x == 0) {                                                      \
      long long t_;                                                                                 \
      asm volatile("mov.u64 %0, %%clock64;" : "=l"(t_) : "f"(fdep), "r"(idep) : "memory");          \
      s_chain_mark[i] = t_;                                                                         \
    }                                                                                               \
  } while (0)
#define CHAIN_CLOCK_BEGIN()                                 \
  const long long chain_t0_ = chain_clock();                \
  if (threadIdx.x == 0 && blockIdx.x == 0) s_chain_mark[0] = s_chain_mark[1] = chain_t0_
#define CHAIN_CLOCK_END(sum, rows)                                   \
  do {                                                               \
    if (threadIdx.x == 0 && blockIdx.x == 0 && s_chain_count < 16) { \
      s_chain_sink = (sum);                                          \
      const long long chain_t1_ = chain_clock();                     \
      s_chain_cycles[s_chain_count] = chain_t1_ - chain_t0_;         \
      s_chain_marks[s_chain_count][0] = s_chain_mark[0] - chain_t0_; \
      s_chain_marks[s_chain_count][1] = s_chain_mark[1] - chain_t0_; \
      s_chain_rows[s_chain_count++] = (rows);                        \
    }                                                                \
  } while (0)
// Session 18: every warp's clock at named points of block 0's layers (lane 0 of each warp), printed
// per warp in cycles since entry. A conv layer's marks: 0 set-up done, 1 its first item's FMAs done,
// 2 its stores issued, 3 its hand-off landed, 4 its first item's bias loaded, 5 that item's first
// input channel's first kernel column done; a dense layer's: 0 top, 1 chain start, 2 chain end,
// 3 partials met, 4 warp 0's adds done, 5 its stores issued, 6 the hand-off landed.
constexpr int kConvMarks = 6, kDenseMarks = 8;  // per layer; conv layers 0-3 first, then dense layers 0-3
constexpr int kWarpMarks = 4 * kConvMarks + 4 * kDenseMarks;
__shared__ long long s_warp_mark[kWarpMarks][16];
__shared__ int s_warp_mark_layer;
#define WARP_MARK(id, fdep)                                                                          \
  do {                                                                                               \
    if (blockIdx.x == 0 && (threadIdx.x & 31) == 0 && (id) < kWarpMarks && s_warp_mark[(id)][threadIdx.x >> 5] == 0) { \
      long long t_;                                                                                  \
      asm volatile("mov.u64 %0, %%clock64;" : "=l"(t_) : "f"(fdep) : "memory");                     \
      s_warp_mark[(id)][threadIdx.x >> 5] = t_;                                                      \
    }                                                                                                \
  } while (0)
#define CONV_WARP_MARK(kind, fdep) WARP_MARK(kConvMarks * s_warp_mark_layer + (kind), fdep)
#define CONV_LAYER_MARK(l, kind) WARP_MARK(kConvMarks * (l) + (kind), 0.0f)
#define DENSE_MARK(l, kind, fdep) WARP_MARK(4 * kConvMarks + kDenseMarks * (l) + (kind), fdep)
#else
#define CONV_LAYER_MARK(l, kind) \
  do {                           \
  } while (0)
#define DENSE_MARK(l, kind, fdep) \
  do {                            \
  } while (0)
#define TRACE_STAMP() \
  do {                \
  } while (0)
#define CHAIN_CLOCK_BEGIN() \
  do {                      \
  } while (0)
#define CHAIN_CLOCK_END(sum, rows) \
  do {                             \
  } while (0)
#define CHAIN_MARK(i, fdep, idep) \
  do {                            \
  } while (0)
#endif

}  // namespace
}  // namespace engine::custom::fused
#define CONV_TRACE_STAMP() TRACE_STAMP()  // the conv layers' own phases too (conv_layers.cuh)
#include "engine/custom/fused/conv_layers.cuh"
#include "engine/custom/fused/fused_layers.hpp"
#include "engine/custom/fused/image_dense.cuh"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::fused {
namespace {

namespace cg = cooperative_groups;

// One block per image (batches of 67 to 1,584 on the H100; fewer images run on clusters) takes the
// items with the channel groups inside the row strips (conv_tiled's kGroupsInner): fewer bank
// conflicts, batch 1,024 120 -> 110 us.
// A cluster keeps strips inside groups: batch 1 was not faster that way (docs/perf-fused-gpu.md,
// session 14), and its work splits between blocks in contiguous ranges of items either way.
// A cluster's blocks take conv items of one output channel instead of kImageOcb (conv_tiled's OCU:
// twice the items, each with half the FMAs, activations and sends) where that paid on the H100
// (session 16, docs/perf-fused-gpu.md): in clusters of at least ImageChainParams::conv_split_blocks
// blocks (an image spread over 8 SMs, whose threads mostly idle: batch 1 and 4 -0.25 to -0.45 us
// in three calls), for the layers whose split items fit one round of a block's threads
// (conv_split_items). In clusters of 4 and 2 (batches of 16 and 64) the split lost 1 to 2.5 us:
// there the block's warps are busy enough that the extra loads cost more than the shorter chains save.
__device__ __forceinline__ bool split_conv_items(const SpatialLayer& L, int blocks, int most_items, int fewest_blocks) {
  if (blocks < fewest_blocks) return false;
  const int oh = L.pool != SpatialOp::Conv ? L.conv_out_h : L.out.height;
  const int ow = L.pool != SpatialOp::Conv ? L.conv_out_w : L.out.width;
  const int items = L.oc_padded / kImageOcb * 2 * ((oh + kImageRowsPerThread - 1) / kImageRowsPerThread) * ow;
  const int per_block = (items + 32 * blocks - 1) / (32 * blocks) * 32;  // whole warps, as conv_tiled's WorkRange
  return per_block <= most_items;
}

// kSpec (image_chain_body): 0 every variant; K > 1 only conv_tiled<K> items (the plan launches that
// kernel only for chains whose conv layers are all K*_2).
template <bool kCluster, int kSpec, class Store>
__device__ void run_conv_image(const SpatialLayer& L, const float* staged, float* smem, const Team<kCluster>& team,
                               Store st, const ImageChainParams& p) {
  constexpr bool kGroupsInner = !kCluster;
  // A cluster's split rule and work ranges: from the plan's table for this cluster size
  // (SpatialLayer::image_split, image_per), or worked out here (ENGINE_FUSED_IMAGE_CONV_SETUP=runtime).
  const int s = 31 - __clz(team.size);
  const bool planned = kCluster && p.conv_setup_planned;
  const int per = planned ? L.image_per[s] : 0;
  const bool split = kCluster && (planned ? (L.image_split >> s) & 1
                                          : split_conv_items(L, team.size, p.conv_split_items, p.conv_split_blocks));
  if constexpr (kSpec != 0) {
    constexpr ConvVariant kVariant = kSpec == 2 ? ConvVariant::K2_2 : kSpec == 3 ? ConvVariant::K3_2 : ConvVariant::K5_2;
    if (kSpec < 2 || L.variant != kVariant) __trap();  // the plan never launches it so
    constexpr int K = kSpec < 2 ? 2 : kSpec;  // (kSpec 1 has no conv layers)
    if (split && L.split_weight_off >= 0)
      conv_tiled<K, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per);
    else if (split)
      conv_tiled<K, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1>(L, staged, smem, 1, st, team.rank, team.size, per);
    else
      conv_tiled<K, kImageOcb, kImageRowsPerThread, kGroupsInner>(L, staged, smem, 1, st, team.rank, team.size, per);
    return;
  }
  if (split && L.split_weight_off >= 0) {
    switch (L.variant) {
      case ConvVariant::K2_2: conv_tiled<2, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      case ConvVariant::K3_2: conv_tiled<3, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      case ConvVariant::K5_2: conv_tiled<5, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      default: break;
    }
  }
  if (split) {
    switch (L.variant) {
      case ConvVariant::K2_2: conv_tiled<2, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      case ConvVariant::K3_2: conv_tiled<3, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      case ConvVariant::K5_2: conv_tiled<5, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      default: break;
    }
  }
  switch (L.variant) {
    case ConvVariant::K2_2: conv_tiled<2, kImageOcb, kImageRowsPerThread, kGroupsInner>(L, staged, smem, 1, st, team.rank, team.size, per); break;
    case ConvVariant::K3_2: conv_tiled<3, kImageOcb, kImageRowsPerThread, kGroupsInner>(L, staged, smem, 1, st, team.rank, team.size, per); break;
    case ConvVariant::K5_2: conv_tiled<5, kImageOcb, kImageRowsPerThread, kGroupsInner>(L, staged, smem, 1, st, team.rank, team.size, per); break;
    default: conv_generic<kImageOcb>(L, staged, smem, 1, st, team.rank, team.size); break;  // Generic2 (the plan uses no other)
  }
}

// load_input_tile (conv_layers.cuh) for one image whose elements tid and tid + blockDim.x were
// read into registers at the kernel's start (their global latency then overlaps the prologue
// instead of following it): the same places and the same epilogue. Ends with a barrier.
__device__ void store_prefetched_input(const ConvChainParams& p, const float (&v)[2], float* smem) {
  const int in_elements = p.input_channels * p.input_height * p.input_width;
  const int in_hw = p.input_height * p.input_width;
  const unsigned epi = p.input_epilogue.code;
  if (p.input.zero_fill) {
    zero_buffer(smem, p.input, 1);
    __syncthreads();
  }
  const Divisor by_hw(in_hw), by_w(p.input_width);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int e = int(threadIdx.x) + k * int(blockDim.x);
    if (e >= in_elements) break;
    const float x = apply_epilogue(v[k], epi);
    if (p.input.dense) {
      smem[p.input.off + e] = x;
    } else {
      const int c = by_hw.div(e), hw = e - c * in_hw;
      const int row = by_w.div(hw), col = hw - row * p.input_width;
      smem[p.input.off + c * p.input.channel + (row + p.input.pad_top) * p.input.pitch + col + p.input.pad_left] = x;
    }
  }
  __syncthreads();
}


// Every dense layer of one image: its input row is at layers[0].in_off in every block of the team;
// slice 0 of layer 0 was requested into slice buffer 0 (and committed) before the call. Ends with a
// team barrier.
template <bool kCluster, int kSpec>
__device__ void dense_part(const ImageChainParams& p, float* smem, const Team<kCluster>& team, unsigned parity,
                           float* y) {
  const DenseChainParams& dp = p.dense;
  float* acc = smem + p.acc_off;
  float* acc_chunk = smem + p.acc_chunk_off;
  const int first_handoff = p.has_conv ? p.conv.layer_count : 0;
  const bool async = kCluster && (kSpec != 0 || p.handoff_async);  // a specialised kernel's are, always
  // The dense tail (ImageChainParams::tail_runs): the layer before the last (`pen`) ends in each block
  // with the last layer's chunk over its own run; block 0 keeps chunk 0's sum (tail_sum, warp 0)
  // and receives the others' at tail_off.
  const int tail = kCluster && async ? team_tail_runs(p, team.size) : 0;
  const int pen = dp.layer_count - 2;
  float tail_sum = 0.0f;
  int buf = 0;
  for (int l = 0; l < dp.layer_count; ++l) {
    const DenseLayer& D = dp.layers[l];
    const DenseShare sh = s_share[l];
    const bool last = l + 1 == dp.layer_count;
    const unsigned epi = D.epilogue.code;
    const float* bias = smem + p.bias_off[l];
    const float* a = smem + D.in_off;
    if (tail > 0 && last) {
      // Block 0's first warp: chunk 0 (its own run, from the bias), then the other blocks' chunks in
      // order, loaded at once; then the softmax on the lanes, as softmax_in_lanes's path does.
      if (team.rank == 0 && threadIdx.x < 32) {
        const int lane = int(threadIdx.x);
        float t[kImageMaxCluster - 1];
#pragma unroll
        for (int r = 1; r < kImageMaxCluster; ++r) t[r - 1] = r < tail ? smem[p.tail_off + (r - 1) * 32 + lane] : 0.0f;
        float v = tail_sum;
#pragma unroll
        for (int r = 1; r < kImageMaxCluster; ++r)
          if (r < tail) v = __fadd_rn(v, t[r - 1]);
        DENSE_MARK(l, 4, v);
        softmax_lanes(lane < D.units ? apply_epilogue(v, epi) : 0.0f, D.units, y, lane);
        DENSE_MARK(l, 5, 0.0f);
      }
      break;
    }
    // A cluster's block computes a few units (f5: 16), so whole warps are left over: they request
    // the next slice after the barrier, while the units are computed (requested before it, by
    // every thread, the copies' issue sat between the previous layer and this one's FMAs: 0.5 us
    // for f5 at batch 1). Otherwise every thread requests it before the barrier.
    // With chunk warps (DenseShare::chunk_warps) warp q sums chunk q of every unit of the block.
    const bool parallel = kCluster && p.dense_parallel && sh.chunk_warps > 0;
    const int busy = parallel ? sh.chunk_warps * 32 : (sh.cols + 31) / 32 * 32;
    const bool spare = kCluster && busy + 32 <= int(blockDim.x);
    // The last layer of an asynchronous team, all in block 0's first warp, ends in the softmax on
    // the lanes' values (no round trip through shared memory and a barrier); see softmax_lanes (image_dense.cuh).
    const bool lanes_softmax = last && softmax_in_lanes(p, kCluster);
    // Chunk warps: one chunk's sum (rows [k0, k0 + n) of the one slice, unit-major at wu) from
    // `init` (ENGINE_FUSED_IMAGE_DENSE picks the loop, for A/B).
    auto chunk_sum = [&](const float* wu, int k0, int n, float init) {
      if constexpr (kSpec != 0) {
        return dense_chain4_deep<2>(a + k0, wu + k0, n, init);  // the plan's default loop
      } else {
        return p.dense_pipelined == 4 ? dense_chain4_deep<2>(a + k0, wu + k0, n, init)
             : p.dense_pipelined == 3 ? dense_chain4_deep<1>(a + k0, wu + k0, n, init)
             : p.dense_pipelined == 2 ? dense_chain4_deep(a + k0, wu + k0, n, init)
             : p.dense_pipelined    ? dense_chain4(a + k0, wu + k0, n, init)
                                    : dense_chain(a + k0, wu + k0, 1, n, init);
      }
    };
    for (int j = 0; j < sh.slices; ++j) {
      auto request_next = [&](int t0) {  // the next slice (of this layer or the next) loads while this one is used
        if (j + 1 < sh.slices)
          request_slice(D, sh, j + 1, smem + p.slice_off[buf ^ 1], t0, int(blockDim.x) - t0);
        else if (l + 1 < dp.layer_count && !(tail > 0 && l == pen))  // the tail stages its own rows
          request_slice(dp.layers[l + 1], s_share[l + 1], 0, smem + p.slice_off[buf ^ 1], t0, int(blockDim.x) - t0);
        __pipeline_commit();
      };
      if (spare) {
        __pipeline_wait_prior(0);  // this thread's copies of this slice have landed
        __syncthreads();           // and everyone's; slice buf ^ 1 is no longer read
        request_next(busy);
      } else {
        request_next(0);
        __pipeline_wait_prior(1);  // every group but the newest: this slice has landed
        __syncthreads();
      }
      const int r0 = j * sh.slice_rows;
      const int rows = min(sh.slice_rows, D.in_padded - r0);
      const float* w = smem + p.slice_off[buf];
      TRACE_STAMP();
      DENSE_MARK(l, 0, 0.0f);
      if (parallel) {  // one slice: the whole layer
        const int q = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
        if (q < sh.chunk_warps) {
          const int u = sh.u0 + lane;
          if (tail > 0 && l == pen && q == 0) {
            // The dense tail: lane j copies row j of the last layer's weights over this block's run
            // (its chunk) into the free slice buffer, landed by the time the run's outputs are.
            const DenseLayer& T = dp.layers[l + 1];
            if (lane < T.units_padded)
              for (int k = 0; k < sh.cols; k += 4)
                __pipeline_memcpy_async(smem + p.slice_off[buf ^ 1] + lane * T.chunk_rows + k,
                                        T.weight_u + size_t(lane) * T.in_padded + sh.u0 + k, 16);
            __pipeline_commit();
          }
          float v = 0.0f;
          if (lane < sh.cols) {
            CHAIN_CLOCK_BEGIN();
            const int k0 = q * D.chunk_rows, n = min(D.chunk_rows, D.in_padded - k0);
            const float init = q == 0 ? bias[u] : 0.0f;
            CHAIN_MARK(0, init, n);
            DENSE_MARK(l, 1, init);
            v = chunk_sum(w + lane * sh.pitch, k0, n, init);
            CHAIN_CLOCK_END(v, n);
            DENSE_MARK(l, 2, v);
            if (q > 0) smem[p.partial_off + (q - 1) * 32 + lane] = v;
          }
          warps_sync(1, sh.chunk_warps * 32);  // every chunk's partial is in place
          DENSE_MARK(l, 3, 0.0f);
          if (q == 0) {
            if (lane < sh.cols && p.partials_batched) {
              // Chunks 1-7's partials by predicated loads issued back to back, then the adds in
              // chunk order. The plain loop (below) issued its loads in dependent batches behind
              // branches: batch 1 -0.35, -0.15 and 0.0 us on H100s (session 19). Exactly the
              // loop's slots: a lane-major table read as two float4s was as fast (session 18) but
              // also read slots no chunk of the layer wrote, which racecheck reported.
              const unsigned base = smem_addr(smem + p.partial_off + lane);
              float t[7];
#pragma unroll
              for (int c = 1; c < 8; ++c) {
                t[c - 1] = 0.0f;
                asm volatile("{ .reg .pred p; setp.lt.s32 p, %2, %3; @p ld.shared.f32 %0, [%1]; }"
                             : "+f"(t[c - 1])
                             : "r"(base + unsigned(c - 1) * 128u), "r"(c), "r"(sh.chunk_warps));
              }
#pragma unroll
              for (int c = 1; c < 8; ++c)
                if (c < sh.chunk_warps) v = __fadd_rn(v, t[c - 1]);
              for (int c = 8; c < sh.chunk_warps; ++c) v = __fadd_rn(v, smem[p.partial_off + (c - 1) * 32 + lane]);
            } else if (lane < sh.cols) {
              for (int c = 1; c < sh.chunk_warps; ++c) v = __fadd_rn(v, smem[p.partial_off + (c - 1) * 32 + lane]);
            }
            DENSE_MARK(l, 4, v);
            if (lanes_softmax) {
              TRACE_STAMP();
              softmax_lanes(u < D.units ? apply_epilogue(v, epi) : 0.0f, D.units, y, lane);
            } else if (tail > 0 && l == pen) {
              // The last layer's chunk over this block's run: lane j sums unit j, the run's outputs
              // by shuffles, one fmaf per row ascending from the bias (block 0, chunk 0) or zero:
              // the chunk order of DenseLayer::chunk_rows, so the same bits as every other path.
              const DenseLayer& T = dp.layers[l + 1];
              const float out = lane < sh.cols && u < D.units ? apply_epilogue(v, epi) : 0.0f;
              __pipeline_wait_prior(0);  // this lane's row, requested above
              const float* wt = smem + p.slice_off[buf ^ 1] + lane * T.chunk_rows;
              float t = team.rank == 0 && lane < T.units_padded ? smem[p.bias_off[l + 1] + lane] : 0.0f;
              for (int k = 0; k < sh.cols; k += 4) {  // runs are whole quads
                const float4 w4 = *reinterpret_cast<const float4*>(wt + k);
                const float x0 = __shfl_sync(0xffffffffu, out, k), x1 = __shfl_sync(0xffffffffu, out, k + 1);
                const float x2 = __shfl_sync(0xffffffffu, out, k + 2), x3 = __shfl_sync(0xffffffffu, out, k + 3);
                t = fmaf(x0, w4.x, t);
                t = fmaf(x1, w4.y, t);
                t = fmaf(x2, w4.z, t);
                t = fmaf(x3, w4.w, t);
              }
              if (team.rank == 0) tail_sum = t;
              else if (lane < T.units_padded)
                async_store_to(0, smem_addr(smem + p.tail_off + (team.rank - 1) * 32 + lane), t,
                               smem_addr(&s_handoff[first_handoff + l]));
            } else if (lane < sh.cols) {
              const float out = u < D.units ? apply_epilogue(v, epi) : 0.0f;
              if (async && !last) AsyncClusterStore{team.size, smem_addr(&s_handoff[first_handoff + l])}(&smem[D.out_off + u], out);
              else if (async) smem[D.out_off + u] = out;  // the last layer stays in block 0
              else team_store(team)(&smem[D.out_off + u], out);
            }
            DENSE_MARK(l, 5, 0.0f);
          }
        }
        TRACE_STAMP();
        buf ^= 1;
        continue;
      }
      if (lanes_softmax) {
        if (team.rank == 0 && threadIdx.x < 32) {
          const int u = int(threadIdx.x);
          float v = 0.0f;
          if (u < sh.u1) {
            ChunkRun c = ChunkRun::at(0, D.chunk_rows, D.in_padded, bias[u], 0.0f);
            CHAIN_CLOCK_BEGIN();
            dense_chunks4(a, w + u * sh.pitch, rows, c);
            CHAIN_CLOCK_END(c.s, rows);
            v = u < D.units ? apply_epilogue(c.s, epi) : 0.0f;
          }
          TRACE_STAMP();  // the last layer's sums (trace builds: where f7's 1.3 us go)
          softmax_lanes(v, D.units, y, u);
          TRACE_STAMP();
        }
        continue;
      }
      for (int u = sh.u0 + int(threadIdx.x); u < sh.u1; u += blockDim.x) {
        // The chunked sum's state carries over slices in acc and acc_chunk (ChunkRun::at, saved()).
        ChunkRun c = ChunkRun::at(r0, D.chunk_rows, D.in_padded, j == 0 ? bias[u] : acc[u], j == 0 ? 0.0f : acc_chunk[u]);
        CHAIN_CLOCK_BEGIN();
        if constexpr (kCluster) dense_chunks4(a + r0, w + (u - sh.u0) * sh.pitch, rows, c);  // unit-major slices
        else dense_chunks_strided(a + r0, w + u, sh.cols, rows, c);
        CHAIN_CLOCK_END(c.s, rows);
        if (j + 1 < sh.slices) {
          acc[u] = c.saved_sum();
          acc_chunk[u] = c.saved_chunk();
        } else {
          const float v = u < D.units ? apply_epilogue(c.s, epi) : 0.0f;
          if (async && !last) AsyncClusterStore{team.size, smem_addr(&s_handoff[first_handoff + l])}(&smem[D.out_off + u], v);
          else if (async) smem[D.out_off + u] = v;  // the last layer stays in block 0
          else team_store(team)(&smem[D.out_off + u], v);
        }
      }
      TRACE_STAMP();  // thread 0's unit (the first of block 0) is done and stored
      if (!spare) __syncthreads();  // the slice buffer is requested again two slices on
      buf ^= 1;
    }
    // The layer's outputs, from every block, are in place (the last one's, with asynchronous
    // hand-offs, in block 0 alone: only its softmax or copy-out reads them).
    if (lanes_softmax) break;  // the image's output is written
    if (async && last) __syncthreads();
    else if (async && tail > 0 && l == pen && team.rank != 0) {}  // the tail sends to block 0 alone: nothing comes
    else if (async) handoff_wait(first_handoff + l, parity);
    else team.sync();
    DENSE_MARK(l, 6, 0.0f);
    TRACE_STAMP();
  }
}

// The image chain for the images of one block (kCluster false) or of one cluster. kSpec 0: any
// chain the plan accepts. kSpec > 0, clusters only (ImageChainParams::cluster_kernel): a chain whose
// hand-offs are all asynchronous, whose conv layers are all K*_2 with K = kSpec (1: no conv layers)
// and whose dense chunks run the default loop; the code for everything else is left out. LeNet-5's
// kernel went from 546 to 162 KiB of code and batch 1 from ~16.5 to ~14.8 us on an H200 (session 21,
// docs/perf-fused-gpu.md): the SMs' instruction caches start cold at every launch, and each jump
// into code not yet fetched waits; the less code between the parts a chain runs, the fewer waits.
template <bool kCluster, int kSpec>
__device__ __forceinline__ void image_chain_body(const ImageChainParams& p, const float* __restrict__ conv_weights,
                                                 const float* __restrict__ x, float* __restrict__ y, int n) {
  extern __shared__ __align__(16) float smem[];
#if ENGINE_IMAGE_CHAIN_TRACE
  // This launch's number: every earlier launch's count is in (the stream orders the launches).
  const unsigned trace_launch = *static_cast<volatile unsigned*>(&g_trace_launches);
  if (threadIdx.x == 0 && blockIdx.x < kTraceBlocks) g_block_entry[trace_launch & 1][blockIdx.x] = global_ns();
  if (threadIdx.x == 0) s_trace_count = s_chain_count = 0;
  for (int i = threadIdx.x; i < kWarpMarks * 16; i += blockDim.x) s_warp_mark[i / 16][i % 16] = 0;
  __syncthreads();
#endif
  TRACE_STAMP();
  const Team<kCluster> team;
  const auto st = team_store(team);
  const ConvChainParams& cp = p.conv;
  // The first image's input, two elements per thread, requested before anything else
  // (p.input_prefetch 1), or loaded at the image's start as every later image's is (0, the default:
  // as fast on H200s in session 20, and no registers held through the prologue).
  float prefetched[2] = {0.0f, 0.0f};
  const int in_elements = cp.input_channels * cp.input_height * cp.input_width;
  const bool prefetch = p.input_prefetch == 1 && p.has_conv && in_elements <= 2 * int(blockDim.x) &&
                        int(blockIdx.x) / team.size < n;
  if (prefetch) {
    const float* src = x + size_t(blockIdx.x / team.size) * in_elements;
    if (int(threadIdx.x) < in_elements) prefetched[0] = src[threadIdx.x];
    if (int(threadIdx.x + blockDim.x) < in_elements) prefetched[1] = src[threadIdx.x + blockDim.x];
  }
  const DenseChainParams& dp = p.dense;
  const bool async = kCluster && (kSpec != 0 || p.handoff_async);
  const int conv_layers = p.has_conv ? cp.layer_count : 0;
  const int dense_layers = p.has_dense ? dp.layer_count : 0;
  // The hand-offs' mbarriers belong to the block's last warp (idle at batch 1 while the first
  // layers run): initialised here, armed once each image's opening barrier has passed.
  const unsigned keeper = blockDim.x - 32;
  if (async && threadIdx.x == keeper) handoff_init(conv_layers + dense_layers);
  const int warps = int(blockDim.x) / 32;
  // The first dense slice: with asynchronous hand-offs and a conv part, the last 4 warps request it
  // once the convolutions start (they have no conv work at batch 1; it took 1.4 us at the head of
  // the forward when every thread issued it there); otherwise every thread at the image's start.
  const bool slice_in_conv = async && p.has_conv && p.has_dense && warps > 4;
  // With asynchronous hand-offs the team's first block computes the whole last dense layer (LeNet-5's
  // f7: 10 units, one warp) and keeps it: no hand-off before the softmax, which that block runs.
  // The dense tail's runs (ImageChainParams::tail_runs) split the layer before the last one.
  {
    const int l = int(threadIdx.x) - (blockDim.x > 256 ? 256 : 0);  // warps the first layers leave idle
    if (l >= 0 && l < dense_layers) {
      const bool tail = kCluster && async && l == dense_layers - 2 && team_tail_runs(p, team.size) > 0;
      s_share[l] = DenseShare(dp.layers[l], team.rank, team.size, async && l == dense_layers - 1,
                              tail ? dp.layers[l + 1].chunk_rows : 0);
    }
  }
  // Conv weights and biases, and the dense biases, staged once for every image this block runs
  // (their own group).
  if (p.has_conv)
    for (int i = threadIdx.x * 4; i < cp.weight_floats; i += blockDim.x * 4)
      __pipeline_memcpy_async(smem + i, conv_weights + i, 16);
  if (!slice_in_conv) stage_dense_biases(p, smem, 0, blockDim.x);  // else with the first slice, off the critical path
  __pipeline_commit();
  // s_share is read next at the image's start, or (slice_in_conv) after the barriers of the input's load.
  if (!slice_in_conv) __syncthreads();
  TRACE_STAMP();
  const DenseLayer& first = dp.layers[0];
  const int teams = gridDim.x / team.size;
  unsigned parity = 0;
  bool arrived = false;  // async: this block's half of the closing cluster barrier
  for (int img = blockIdx.x / team.size; img < n; img += teams, parity ^= 1) {
    const bool first_image = img == int(blockIdx.x) / team.size;
    if (p.has_dense && !slice_in_conv) request_slice(first, s_share[0], 0, smem + p.slice_off[0], 0, blockDim.x);
    __pipeline_commit();
    // The first image's opening barrier in two halves: it orders the mbarriers' initialisation
    // before any block's first st.async (fence.mbarrier_init above), and needs no fence of its own,
    // so its latency hides behind the input's load. Later images (a team that runs several) open
    // with a full cluster barrier: every block is past its previous image. Each hand-off is armed
    // after the opening barrier with the bytes this block will receive; st.async bytes that land
    // before the arming count against the same phase (its transaction count may go negative), and
    // the phase cannot complete before the arming, its one expected arrival.
    if (async && first_image) cluster_arrive_relaxed();
    TRACE_STAMP();
    if (p.has_conv) {
      // Every block of the team loads the input and keeps the whole of every activation.
      if (prefetch && first_image) store_prefetched_input(cp, prefetched, smem);
      else load_input_tile(cp, x + size_t(img) * in_elements, 1, smem);
      TRACE_STAMP();
      __pipeline_wait_prior(1);  // the conv weights (the dense slice may still be in flight)
      if (async && first_image) {
        __syncthreads();  // every thread's share of the conv weights has landed
        cluster_wait();
      } else {
        team.sync();  // every block is past its previous image and has zeroed its padded input
      }
      if (slice_in_conv) {
        request_slice(first, s_share[0], 0, smem + p.slice_off[0], (warps - 4) * 32, 128);
        if (first_image) stage_dense_biases(p, smem, (warps - 4) * 32, 128);
      }
      __pipeline_commit();
      if (async && threadIdx.x == keeper) handoff_arm_all(p, kCluster ? team_tail_runs(p, team.size) : 0, team.rank);
      TRACE_STAMP();
      for (int l = 0; l < cp.layer_count; ++l) {
        const SpatialLayer& L = cp.layers[l];
#if ENGINE_IMAGE_CHAIN_TRACE
        s_warp_mark_layer = l;  // every thread writes the same value (trace builds only)
#endif
        if (kSpec != 0 || (async && !L.out.zero_fill)) {  // a specialised kernel has no other kind
          const AsyncClusterStore ast{team.size, smem_addr(&s_handoff[l])};
          if (L.op == SpatialOp::Conv) run_conv_image<kCluster, kSpec>(L, smem, smem, team, ast, p);
          else pool_layer(L, smem, 1, ast, team.rank, team.size);
          TRACE_STAMP();
          CONV_LAYER_MARK(l, 2);
          handoff_wait(l, parity);
          CONV_LAYER_MARK(l, 3);
          TRACE_STAMP();
          continue;
        }
        // A buffer read padded is zeroed whole first; its layer hands off through cluster barriers.
        if (L.out.zero_fill) {
          zero_buffer(smem, L.out, 1);
          team.sync();  // zeros everywhere before any block stores into the buffer
        }
        if (L.op == SpatialOp::Conv) run_conv_image<kCluster, 0>(L, smem, smem, team, st, p);
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
        // With the plan's flatten_in_place the last conv layer wrote the first dense layer's input
        // row itself, and each thread has waited for all of it: no copy, no barrier.
        if (!p.flatten_in_place) {
          store_chain_output(cp, smem, 1, smem + first.in_off, first.in_padded, dp.input_epilogue);
          for (int k = cp.output_elements + threadIdx.x; k < first.in_padded; k += blockDim.x) smem[first.in_off + k] = 0.0f;
        }
      } else if (team.rank == 0) {
        store_chain_output(cp, smem, 1, y + size_t(img) * cp.output_elements, cp.output_elements, Epilogue{});
      }
    } else {
      const int F = dp.input_features;
      const float* src = x + size_t(img) * F;
      for (int k = threadIdx.x; k < first.in_padded; k += blockDim.x)
        smem[first.in_off + k] = k < F ? apply_epilogue(src[k], dp.input_epilogue) : 0.0f;
      if (async && first_image) {
        __syncthreads();
        cluster_wait();
      } else {
        team.sync();  // every block is past its previous image
      }
      if (async && threadIdx.x == keeper) handoff_arm_all(p, kCluster ? team_tail_runs(p, team.size) : 0, team.rank);
    }
    if (!p.has_conv || !p.flatten_in_place) __syncthreads();
    TRACE_STAMP();
    if (p.has_dense) {
      const DenseLayer& last = dp.layers[dp.layer_count - 1];
      const int U = last.units;
      float* dst = y + size_t(img) * U;
      dense_part<kCluster, kSpec>(p, smem, team, parity, dst);
      if (async && img + teams >= n) {
        cluster_arrive_relaxed();  // every hand-off this block waits for has landed
        arrived = true;
      }
      if (team.rank == 0 && !softmax_in_lanes(p, kCluster)) {
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
  if (threadIdx.x == 0 && blockIdx.x < kTraceBlocks) g_block_exit[trace_launch & 1][blockIdx.x] = global_ns();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const unsigned done = atomicAdd(&g_trace_launches, 1u);
    if (done == 2000u) {
      printf("image_chain trace (cluster %d, %d blocks, ns since entry):", kCluster ? team.size : 1, int(gridDim.x));
      for (int i = 1; i < s_trace_count; ++i) printf(" %llu", s_trace[i] - s_trace[0]);
      printf("\nimage_chain trace, SM cycles since entry:");
      for (int i = 1; i < s_trace_count; ++i) printf(" %llu", s_trace_clock[i] - s_trace_clock[0]);
      printf("\nimage_chain dense sums of thread 0 (cycles/rows):");
      for (int i = 0; i < s_chain_count; ++i)
        printf(" %lld/%d (operands %lld, first loads %lld)", s_chain_cycles[i], s_chain_rows[i], s_chain_marks[i][0],
               s_chain_marks[i][1]);
      printf("\n");
      for (int id = 0; id < kWarpMarks; ++id) {
        bool any = false;
        for (int w = 0; w < 16; ++w) any |= s_warp_mark[id][w] != 0;
        if (!any) continue;
        const bool conv = id < 4 * kConvMarks;
        const int d = id - 4 * kConvMarks;
        printf("image_chain warp marks %s %d.%d (cycles since entry, warps 0-15):", conv ? "conv" : "dense",
               conv ? id / kConvMarks : d / kDenseMarks, conv ? id % kConvMarks : d % kDenseMarks);
        for (int w = 0; w < 16; ++w) {
          if (s_warp_mark[id][w]) printf(" %lld", s_warp_mark[id][w] - (long long)s_trace_clock[0]);
          else printf(" -");
        }
        printf("\n");
      }
    } else if (done == 2001u) {  // the 2,000th launch's blocks, in ns from its block 0's entry
      const unsigned long long* in = g_block_entry[0];
      const unsigned long long* out = g_block_exit[0];
      printf("image_chain blocks (launch 2000, ns from block 0's entry; entry/exit):");
      for (int b = 0; b < int(gridDim.x) && b < kTraceBlocks; ++b)
        printf(" %lld/%lld", (long long)(in[b] - in[0]), (long long)(out[b] - in[0]));
      printf("\n");
    }
  }
#endif
}

// Two blocks per SM without clusters (batches of up to 12 images per SM, throughput: at most 64
// registers); a cluster runs one block per SM.
template <bool kCluster>
__global__ void __launch_bounds__(kImageThreads, kCluster ? 1 : 2)
    image_chain_kernel(const __grid_constant__ ImageChainParams p, const float* __restrict__ conv_weights,
                       const float* __restrict__ x, float* __restrict__ y, int n) {
  image_chain_body<kCluster, 0>(p, conv_weights, x, y, n);
}

// The specialised cluster kernels (image_chain_body's kSpec); nothing below sm_90, which has no clusters.
template <int kSpec>
__global__ void __launch_bounds__(kImageThreads, 1)
    image_chain_special_kernel(const __grid_constant__ ImageChainParams p, const float* __restrict__ conv_weights,
                               const float* __restrict__ x, float* __restrict__ y, int n) {
#if ENGINE_IMAGE_CHAIN_CLUSTERS
  image_chain_body<true, kSpec>(p, conv_weights, x, y, n);
#else
  __trap();
#endif
}

using ImageChainKernel = void (*)(ImageChainParams, const float*, const float*, float*, int);

// The cluster kernel for ImageChainParams::cluster_kernel.
ImageChainKernel cluster_kernel(int spec) {
  switch (spec) {
    case 1: return image_chain_special_kernel<1>;
    case 2: return image_chain_special_kernel<2>;
    case 3: return image_chain_special_kernel<3>;
    case 5: return image_chain_special_kernel<5>;
    default: return image_chain_kernel<true>;
  }
}

}  // namespace

void image_chain_prepare(int smem_bytes, const char* context) {
  CUDA_CHECK_CTX(cudaFuncSetAttribute(image_chain_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                 context);
  for (int spec : {0, 1, 2, 3, 5})
    CUDA_CHECK_CTX(cudaFuncSetAttribute(cluster_kernel(spec), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
                   context);
}

int image_chain_blocks_per_sm(int smem_bytes) {
  int blocks = 0;
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, image_chain_kernel<false>, kImageThreads, smem_bytes));
  return blocks;
}

namespace {

// A launch of `grid` blocks of the image chain in clusters of `size`; `attr` holds the cluster
// attribute the configuration points to (the capacity query and the launch share it).
cudaLaunchConfig_t cluster_config(int size, unsigned grid, int smem_bytes, cudaStream_t stream,
                                  cudaLaunchAttribute (&attr)[1]) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(size);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(kImageThreads);
  config.dynamicSmemBytes = size_t(smem_bytes);
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

}  // namespace

int image_chain_cluster_capacity(int smem_bytes, int size) {
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t config = cluster_config(size, unsigned(size), smem_bytes, nullptr, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, image_chain_kernel<true>, &config) == cudaSuccess) return clusters;
  (void)cudaGetLastError();  // a size the device cannot schedule is an answer, not an error
  return 0;
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
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t config = cluster_config(cluster, unsigned(n * cluster), p.smem_floats * int(sizeof(float)), stream, attr);
#if ENGINE_IMAGE_CHAIN_TRACE
  // Trace builds: ENGINE_IMAGE_CHAIN_ONE_TEAM=1 runs every image on one cluster, one after another,
  // so the stamps show a warm second image beside the first (the study of what is cold per launch).
  if (const char* one = std::getenv("ENGINE_IMAGE_CHAIN_ONE_TEAM"); one && one[0] == '1') config.gridDim = dim3(unsigned(cluster));
#endif
  CUDA_CHECK_CTX(cudaLaunchKernelEx(&config, cluster_kernel(p.cluster_kernel), p, conv_weights, x, y, n), context);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::fused

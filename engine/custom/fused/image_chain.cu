// The image chain: the whole fused chain (conv part, then dense part, then softmax) for one image
// per block, for batches too small to fill the GPU with the tiled kernels (conv_chain.cu,
// dense_chain.cu). docs/design/custom-fused.md has the prediction and the measurements.
//
// Why a third kernel: at batch 1 the tiled kernels give one block the whole image with work items
// sized for throughput (LeNet-5's c3: 60 items of 4,800 FMAs, two warps busy) and stream the first
// dense layer's 192 KB of weights from L2 through 30 threads. Here:
//  - conv work items are 2 output channels x 2 rows (K*_2 / Generic2 variants; c3: 400 items over
//    512 threads);
//  - the conv part hands its output to the dense part in shared memory (one kernel, not two);
//  - each dense layer's weights are staged through shared memory in slices with cp.async, two
//    slices in turn, the first one requested while the convolutions run.
// Batches of a few images spread each image over a cluster of up to 8 blocks (one per SM), each
// computing a share of every layer and sending it to every block of the cluster with st.async,
// which completes on a per-layer mbarrier in the receiver: no cluster barrier between layers.
// Every output is summed in the tiled kernels' order (conv_layers.cuh; dense: the chunked order of
// DenseLayer::chunk_rows over the zero-padded rows, one fmaf per step within a chunk), and the same activation and softmax
// functions run, so an image's outputs have the same bits whichever kernel computed them; the
// bitwise batch-split tests (tests/gpu/custom_fused_test.cpp) check that across the two paths.
#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include "engine/custom/fused/image_chain_trace_hooks.cuh"  // before the layers: they call the hooks too
#include "engine/custom/fused/conv_layers.cuh"
#include "engine/custom/fused/fused_layers.hpp"
#include "engine/custom/fused/image_dense.cuh"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom::fused {
namespace {

namespace cg = cooperative_groups;

// One block per image (the larger batches; fewer images run on clusters) takes the items with the
// channel groups inside the row strips (conv_tiled's kGroupsInner): fewer bank conflicts.
// A cluster keeps strips inside groups: batch 1 was not faster the other way
// (docs/design/custom-fused.md), and its work splits between blocks in contiguous ranges of items either way.
// A cluster's blocks take conv items of one output channel instead of kImageOcb (conv_tiled's OCU:
// twice the items, each with half the FMAs, activations and sends) by the plan's split rule
// (SpatialLayer::image_split, fused_plan.cpp's plan_image_conv_setup): in large clusters, whose
// threads mostly idle, for the layers whose split items fit one round of a block's threads; in
// smaller clusters the block's warps are busy enough that the extra loads cost more than the
// shorter chains save (docs/design/custom-fused.md). Their weights come from the one-channel copy
// (SpatialLayer::split_weight_off).
// kSpec (image_chain_body): 0 every variant; K > 1 only conv_tiled<K> items (the plan launches that
// kernel only for chains whose conv layers are all K*_2).
template <bool kCluster, int kSpec, class Store>
__device__ void run_conv_image(const SpatialLayer& L, const float* staged, float* smem, const Team<kCluster>& team,
                               Store st, const ImageChainParams& p) {
  constexpr bool kGroupsInner = !kCluster;
  // A cluster's split rule and work ranges: from the plan's table for this cluster size
  // (SpatialLayer::image_split, image_per).
  const int s = 31 - __clz(team.size);
  const int per = kCluster ? L.image_per[s] : 0;
  const bool split = kCluster && (L.image_split >> s) & 1;
  if constexpr (kSpec != 0) {
    constexpr ConvVariant kVariant = kSpec == 2 ? ConvVariant::K2_2 : kSpec == 3 ? ConvVariant::K3_2 : ConvVariant::K5_2;
    if (kSpec < 2 || L.variant != kVariant) __trap();  // the plan never launches it so
    constexpr int K = kSpec < 2 ? 2 : kSpec;  // (kSpec 1 has no conv layers)
    if (split)
      conv_tiled<K, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per);
    else
      conv_tiled<K, kImageOcb, kImageRowsPerThread, kGroupsInner>(L, staged, smem, 1, st, team.rank, team.size, per);
    return;
  }
  if (split) {
    switch (L.variant) {
      case ConvVariant::K2_2: conv_tiled<2, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      case ConvVariant::K3_2: conv_tiled<3, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per); return;
      case ConvVariant::K5_2: conv_tiled<5, kImageOcb, kImageRowsPerThread, kGroupsInner, Store, 1, true>(L, staged, smem, 1, st, team.rank, team.size, per); return;
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
  const bool async = kCluster;  // a cluster's hand-offs: st.async onto per-layer mbarriers
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
    // every thread, the copies' issue would sit between the previous layer and this one's FMAs).
    // Otherwise every thread requests it before the barrier.
    // With chunk warps (DenseShare::chunk_warps) warp q sums chunk q of every unit of the block.
    const bool parallel = kCluster && sh.chunk_warps > 0;
    const int busy = parallel ? sh.chunk_warps * 32 : (sh.cols + 31) / 32 * 32;
    const bool spare = kCluster && busy + 32 <= int(blockDim.x);
    // The last layer of an asynchronous team, all in block 0's first warp, ends in the softmax on
    // the lanes' values (no round trip through shared memory and a barrier); see softmax_lanes (image_dense.cuh).
    const bool lanes_softmax = last && softmax_in_lanes(p, kCluster);
    // Chunk warps: one chunk's sum (rows [k0, k0 + n) of the one slice, unit-major at wu) from
    // `init`, 16 steps in flight, a short chunk's operands loaded whole first (dense_steps.cuh).
    auto chunk_sum = [&](const float* wu, int k0, int n, float init) {
      return dense_chain4_deep<2>(a + k0, wu + k0, n, init);
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
            if (lane < sh.cols) {
              // Chunks 1-7's partials by predicated loads issued back to back (a plain loop issues
              // them in dependent batches behind branches), then the adds in chunk order. Exactly
              // the slots the chunks wrote: racecheck sees no read of a slot no chunk wrote.
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
          TRACE_STAMP();  // the last layer's sums
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
// conv layers are all K*_2 with K = kSpec (1: no conv layers); the code for everything else is left
// out, a fraction of the general kernel's (docs/design/custom-fused.md): the SMs' instruction caches
// start cold at every launch, and each jump into code not yet fetched waits; the less code between
// the parts a chain runs, the fewer waits.
template <bool kCluster, int kSpec>
__device__ __forceinline__ void image_chain_body(const ImageChainParams& p, const float* __restrict__ conv_weights,
                                                 const float* __restrict__ x, float* __restrict__ y, int n) {
  extern __shared__ __align__(16) float smem[];
  TRACE_ENTRY();
  TRACE_STAMP();
  const Team<kCluster> team;
  const auto st = team_store(team);
  const ConvChainParams& cp = p.conv;
  // Each image's input is loaded at the image's start (no registers held through the prologue).
  const int in_elements = cp.input_channels * cp.input_height * cp.input_width;
  const DenseChainParams& dp = p.dense;
  const bool async = kCluster;
  const int conv_layers = p.has_conv ? cp.layer_count : 0;
  const int dense_layers = p.has_dense ? dp.layer_count : 0;
  // The hand-offs' mbarriers belong to the block's last warp (idle at batch 1 while the first
  // layers run): initialised here, armed once each image's opening barrier has passed.
  const unsigned keeper = blockDim.x - 32;
  if (async && threadIdx.x == keeper) handoff_init(conv_layers + dense_layers);
  const int warps = int(blockDim.x) / 32;
  // The first dense slice: with asynchronous hand-offs and a conv part, the last 4 warps request it
  // once the convolutions start (they have no conv work at batch 1, and the copies' issue stays off
  // the head of the forward); otherwise every thread at the image's start.
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
      load_input_tile(cp, x + size_t(img) * in_elements, 1, smem);
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
        TRACE_CONV_LAYER(l);
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
  TRACE_EXIT(kCluster ? team.size : 1);
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
  TRACE_LAUNCH_CONFIG(config, cluster);
  CUDA_CHECK_CTX(cudaLaunchKernelEx(&config, cluster_kernel(p.cluster_kernel), p, conv_weights, x, y, n), context);
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom::fused

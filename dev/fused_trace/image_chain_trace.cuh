#pragma once
// Trace instrumentation of the image chain (engine/custom/fused/image_chain.cu), for studies of
// where a batch-1 forward spends its time; never in a product build. The product kernel calls
// no-op hooks (engine/custom/fused/image_chain_trace_hooks.cuh); built with
// -DENGINE_IMAGE_CHAIN_TRACE=1 they take the definitions here: block 0 stamps %globaltimer after
// every phase of its first image and prints the stamps of its 2,000th launch (a warm one), with
// the SM cycles of thread 0's dense sums, every warp's marks and every block's entry and exit.
// README.md says how to build and run it.
#include <cstdio>
#include <cstdlib>

namespace engine::custom::fused {
namespace {
__device__ unsigned g_trace_launches = 0;
// Every block's entry and exit (its first and last instruction's %globaltimer), per launch parity:
// the 2,001st launch prints the 2,000th's (block 0's own span does not show time spent outside it).
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
// The SM cycles of thread 0's dense sums alone (each chain call of block 0's thread 0), to set
// against dev/probes/solo_dense.cu's cycles for the same loop on its own. The sum is stored before
// the second clock read, so the read waits for the chain.
__shared__ long long s_chain_cycles[16];
__shared__ int s_chain_rows[16], s_chain_count;
__shared__ float s_chain_sink;
__device__ __forceinline__ long long chain_clock() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
// Two marks inside a chain call (its operands' parameters in registers, its first
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
// Every warp's clock at named points of block 0's layers (lane 0 of each warp), printed
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

}  // namespace
}  // namespace engine::custom::fused

#define CONV_TRACE_STAMP() TRACE_STAMP()  // the conv layers' own phases too (conv_layers.cuh)
// The conv layer whose marks CONV_WARP_MARK writes (every thread writes the same value).
#define TRACE_CONV_LAYER(l) (s_warp_mark_layer = (l))
// At the kernel's entry: this launch's number (every earlier launch's count is in: the stream
// orders the launches), the block's entry time, the marks cleared.
#define TRACE_ENTRY()                                                                                            \
  const unsigned trace_launch = *static_cast<volatile unsigned*>(&g_trace_launches);                             \
  if (threadIdx.x == 0 && blockIdx.x < kTraceBlocks) g_block_entry[trace_launch & 1][blockIdx.x] = global_ns();  \
  if (threadIdx.x == 0) s_trace_count = s_chain_count = 0;                                                       \
  for (int i = threadIdx.x; i < kWarpMarks * 16; i += blockDim.x) s_warp_mark[i / 16][i % 16] = 0;               \
  __syncthreads()
// At the kernel's exit: the block's exit time; block 0 of the 2,000th launch prints its stamps and
// marks, of the 2,001st every block's entry and exit in the 2,000th.
#define TRACE_EXIT(cluster_size)                                                                                       \
  do {                                                                                                                 \
  TRACE_STAMP();                                                                                                       \
  if (threadIdx.x == 0 && blockIdx.x < kTraceBlocks) g_block_exit[trace_launch & 1][blockIdx.x] = global_ns();         \
  if (threadIdx.x == 0 && blockIdx.x == 0) {                                                                           \
    const unsigned done = atomicAdd(&g_trace_launches, 1u);                                                            \
    if (done == 2000u) {                                                                                               \
      printf("image_chain trace (cluster %d, %d blocks, ns since entry):", (cluster_size), int(gridDim.x));            \
      for (int i = 1; i < s_trace_count; ++i) printf(" %llu", s_trace[i] - s_trace[0]);                                \
      printf("\nimage_chain trace, SM cycles since entry:");                                                           \
      for (int i = 1; i < s_trace_count; ++i) printf(" %llu", s_trace_clock[i] - s_trace_clock[0]);                    \
      printf("\nimage_chain dense sums of thread 0 (cycles/rows):");                                                   \
      for (int i = 0; i < s_chain_count; ++i)                                                                          \
        printf(" %lld/%d (operands %lld, first loads %lld)", s_chain_cycles[i], s_chain_rows[i], s_chain_marks[i][0],  \
               s_chain_marks[i][1]);                                                                                   \
      printf("\n");                                                                                                    \
      for (int id = 0; id < kWarpMarks; ++id) {                                                                        \
        bool any = false;                                                                                              \
        for (int w = 0; w < 16; ++w) any |= s_warp_mark[id][w] != 0;                                                   \
        if (!any) continue;                                                                                            \
        const bool conv = id < 4 * kConvMarks;                                                                         \
        const int d = id - 4 * kConvMarks;                                                                             \
        printf("image_chain warp marks %s %d.%d (cycles since entry, warps 0-15):", conv ? "conv" : "dense",           \
               conv ? id / kConvMarks : d / kDenseMarks, conv ? id % kConvMarks : d % kDenseMarks);                    \
        for (int w = 0; w < 16; ++w) {                                                                                 \
          if (s_warp_mark[id][w]) printf(" %lld", s_warp_mark[id][w] - (long long)s_trace_clock[0]);                   \
          else printf(" -");                                                                                           \
        }                                                                                                              \
        printf("\n");                                                                                                  \
      }                                                                                                                \
    } else if (done == 2001u) {  /* the 2,000th launch's blocks, in ns from its block 0's entry */                        \
      const unsigned long long* in = g_block_entry[0];                                                                 \
      const unsigned long long* out = g_block_exit[0];                                                                 \
      printf("image_chain blocks (launch 2000, ns from block 0's entry; entry/exit):");                                \
      for (int b = 0; b < int(gridDim.x) && b < kTraceBlocks; ++b)                                                     \
        printf(" %lld/%lld", (long long)(in[b] - in[0]), (long long)(out[b] - in[0]));                                 \
      printf("\n");                                                                                                    \
    }                                                                                                                  \
  }                                                                                                                    \
  } while (0)
// ENGINE_IMAGE_CHAIN_ONE_TEAM=1 runs every image on one cluster, one after another, so the stamps
// show a warm second image beside the first (what is cold per launch).
#define TRACE_LAUNCH_CONFIG(config, cluster)                                                            \
  do {                                                                                                  \
    if (const char* one = std::getenv("ENGINE_IMAGE_CHAIN_ONE_TEAM"); one && one[0] == '1')             \
      (config).gridDim = dim3(unsigned(cluster));                                                       \
  } while (0)

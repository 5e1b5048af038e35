#pragma once
// What the probes share (dev/probes/*.cu): a CUDA error check that exits, shared-memory addresses
// for inline PTX, and one thread's TMA fill of shared memory (bulk copies counted on an mbarrier,
// waited for). Each probe builds with nvcc alone, from the repository's root (-I.).
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

__device__ __forceinline__ unsigned saddr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

// Whether the mbarrier's phase 0 has completed (one poll).
__device__ __forceinline__ bool phase0_done(unsigned long long* bar) {
  unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
               : "=r"(done)
               : "r"(saddr(bar))
               : "memory");
  return done != 0;
}

// One thread: `bytes` from global `src` into shared `dst` by bulk copies of `chunk` bytes (multiples
// of 16), all issued at once, counted on `bar` (initialised here), and waited for.
__device__ __forceinline__ void bulk_fill(void* dst, const void* src, int bytes, int chunk, unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
  for (int off = 0; off < bytes; off += chunk) {
    const int n = min(chunk, bytes - off);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     saddr(static_cast<char*>(dst) + off)),
                 "l"(static_cast<const char*>(src) + off), "r"(n), "r"(saddr(bar))
                 : "memory");
  }
  while (!phase0_done(bar)) {
  }
}

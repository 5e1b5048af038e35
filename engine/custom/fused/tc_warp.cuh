#pragma once
// The warp-level operations of the tensor-core chain (tc_chain.cuh): ldmatrix, mma.sync m16n8k16
// with fp16 or bf16 operands and fp32 sums, shuffles, barriers, cp.async. On the device they are
// the instructions. Compiled for the host with -DENGINE_TC_EMULATE, each lane is a host thread and
// every operation is computed from all 32 lanes' operands at a barrier, following the PTX ISA's
// fragment layouts: the kernel's index logic (pixel orders, pooling, tiles, pairs of warps) runs
// and is checked on a machine without a GPU (tests/gpu/emulated/custom_tc_emulated_test.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#if defined(__CUDACC__)
#include <cuda_pipeline.h>
#endif

#include <cstring>
#include <type_traits>
#if defined(ENGINE_TC_EMULATE) && !defined(__CUDA_ARCH__)
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#endif

// Emulated builds put every function in another inline namespace: the host versions of the same
// templates, compiled without emulation in tc_chain.cu, must not be merged with these by the linker.
#if defined(ENGINE_TC_EMULATE)
#define ENGINE_TC_ABI emulated
#else
#define ENGINE_TC_ABI device
#endif

namespace engine::custom::tc {
inline namespace ENGINE_TC_ABI {

#if !defined(__CUDA_ARCH__) && defined(ENGINE_TC_EMULATE)
struct EmuBarrier {
  std::mutex m;
  std::condition_variable cv;
  int count, waiting = 0;
  unsigned long generation = 0;
  explicit EmuBarrier(int c) : count(c) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    const unsigned long g = generation;
    if (++waiting == count) {
      waiting = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != g; });
    }
  }
};
struct EmuWarp {
  EmuBarrier bar{32};
  const void* addr[32];
  unsigned a[32][4], b[32][2];
  float v[32];
};
// One emulated block: its threads set emu_block and emu_thread before running the kernel's body.
struct EmuBlock {
  explicit EmuBlock(int threads) : bar(threads) {}
  EmuBarrier bar;
  EmuWarp warps[8];
  EmuBarrier pair_bar[4] = {EmuBarrier(64), EmuBarrier(64), EmuBarrier(64), EmuBarrier(64)};
};
inline thread_local EmuBlock* emu_block = nullptr;
inline thread_local int emu_thread = 0;
inline EmuWarp& emu_warp() { return emu_block->warps[emu_thread / 32]; }
inline int emu_lane() { return emu_thread % 32; }
#endif

// The operand types: what packs two floats into a 32-bit register, the mma instruction, and the
// element back to float.
template <class T>
struct Operand;
template <>
struct Operand<__half> {
  __host__ __device__ static unsigned pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    unsigned u;
    memcpy(&u, &h, 4);
    return u;
  }
  __host__ __device__ static float to_float(__half v) { return __half2float(v); }
  __host__ __device__ static __half from_float(float v) { return __float2half_rn(v); }
#if !defined(__CUDA_ARCH__) && defined(ENGINE_TC_EMULATE)
  static float element(unsigned word, int hi) {
    const unsigned short bits = static_cast<unsigned short>(hi ? word >> 16 : word & 0xffffu);
    __half h;
    std::memcpy(&h, &bits, 2);
    return __half2float(h);
  }
#endif
};
template <>
struct Operand<__nv_bfloat16> {
  __host__ __device__ static unsigned pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    unsigned u;
    memcpy(&u, &h, 4);
    return u;
  }
  __host__ __device__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  __host__ __device__ static __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
#if !defined(__CUDA_ARCH__) && defined(ENGINE_TC_EMULATE)
  static float element(unsigned word, int hi) {
    const unsigned bits = (hi ? word >> 16 : word & 0xffffu) << 16;  // bf16 is the top half of a float
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
#endif
};

// Four 8x8 matrices of 16-bit elements (or 8x16 of 8-bit ones) from shared memory: lanes 8q..8q+7 give
// matrix q's rows (16 bytes each); a lane receives 4 bytes of each matrix: row lane / 4, bytes
// 4 (lane % 4) .. + 3.
template <class T>
__host__ __device__ __forceinline__ void ldmatrix_x4(const T* p, unsigned& r0, unsigned& r1, unsigned& r2,
                                                     unsigned& r3) {
#ifdef __CUDA_ARCH__
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(unsigned(__cvta_generic_to_shared(p))));
#elif defined(ENGINE_TC_EMULATE)
  EmuWarp& w = emu_warp();
  const int lane = emu_lane();
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {  // the instruction needs 16-byte aligned rows
    std::fprintf(stderr, "ldmatrix: lane %d's row address %p is not 16-byte aligned\n", lane, static_cast<const void*>(p));
    std::abort();
  }
  w.addr[lane] = p;
  w.bar.wait();
  unsigned r[4];
  for (int q = 0; q < 4; ++q)  // this lane gets row lane / 4 of matrix q, elements 2 (lane % 4), + 1
    std::memcpy(&r[q], static_cast<const char*>(w.addr[8 * q + lane / 4]) + 4 * (lane % 4), 4);
  w.bar.wait();
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
#endif
}

// d += A (16x16, row) * B (16x8, col), operands of type T, sums in fp32.
template <class T>
__host__ __device__ __forceinline__ void mma_16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                   unsigned b0, unsigned b1) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#elif defined(ENGINE_TC_EMULATE)
  EmuWarp& w = emu_warp();
  const int lane = emu_lane();
  w.a[lane][0] = a0, w.a[lane][1] = a1, w.a[lane][2] = a2, w.a[lane][3] = a3;
  w.b[lane][0] = b0, w.b[lane][1] = b1;
  w.bar.wait();
  float A[16][16], B[16][8];
  for (int L = 0; L < 32; ++L) {
    const int g = L / 4, t = L % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = Operand<T>::element(w.a[L][0], e);
      A[g + 8][2 * t + e] = Operand<T>::element(w.a[L][1], e);
      A[g][2 * t + 8 + e] = Operand<T>::element(w.a[L][2], e);
      A[g + 8][2 * t + 8 + e] = Operand<T>::element(w.a[L][3], e);
      B[2 * t + e][g] = Operand<T>::element(w.b[L][0], e);
      B[2 * t + 8 + e][g] = Operand<T>::element(w.b[L][1], e);
    }
  }
  w.bar.wait();
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float s = d[i];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    d[i] = s;
  }
#endif
}

// d += A (16x32 int8, row) * B (32x8 int8, col), sums in int32 (exact). A lane holds A's row g, k
// 4t..4t+3 (a0), row g + 8 (a1), and k 16 + 4t.. (a2, a3); B's k 4t..4t+3 (b0) and 16 + 4t.. (b1) of
// column g; each register's lowest byte is the lowest k. D as the fp32 shape's.
__host__ __device__ __forceinline__ void mma_16832_s8(int (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                      unsigned b0, unsigned b1) {
#ifdef __CUDA_ARCH__
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#elif defined(ENGINE_TC_EMULATE)
  EmuWarp& w = emu_warp();
  const int lane = emu_lane();
  w.a[lane][0] = a0, w.a[lane][1] = a1, w.a[lane][2] = a2, w.a[lane][3] = a3;
  w.b[lane][0] = b0, w.b[lane][1] = b1;
  w.bar.wait();
  int A[16][32], B[32][8];
  auto byte = [](unsigned word, int i) { return int(static_cast<signed char>((word >> (8 * i)) & 0xffu)); };
  for (int L = 0; L < 32; ++L) {
    const int g = L / 4, t = L % 4;
    for (int e = 0; e < 4; ++e) {
      A[g][4 * t + e] = byte(w.a[L][0], e);
      A[g + 8][4 * t + e] = byte(w.a[L][1], e);
      A[g][16 + 4 * t + e] = byte(w.a[L][2], e);
      A[g + 8][16 + 4 * t + e] = byte(w.a[L][3], e);
      B[4 * t + e][g] = byte(w.b[L][0], e);
      B[16 + 4 * t + e][g] = byte(w.b[L][1], e);
    }
  }
  w.bar.wait();
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    int s = d[i];
    for (int k = 0; k < 32; ++k) s += A[row][k] * B[k][col];
    d[i] = s;
  }
#endif
}

__host__ __device__ __forceinline__ float shfl_xor(float v, int mask) {
#ifdef __CUDA_ARCH__
  return __shfl_xor_sync(0xffffffffu, v, mask);
#elif defined(ENGINE_TC_EMULATE)
  EmuWarp& w = emu_warp();
  w.v[emu_lane()] = v;
  w.bar.wait();
  const float r = w.v[emu_lane() ^ mask];
  w.bar.wait();
  return r;
#else
  return v;
#endif
}

__host__ __device__ __forceinline__ void sync_warp() {
#ifdef __CUDA_ARCH__
  __syncwarp();
#elif defined(ENGINE_TC_EMULATE)
  emu_warp().bar.wait();
#endif
}

__host__ __device__ __forceinline__ void sync_block() {
#ifdef __CUDA_ARCH__
  __syncthreads();
#elif defined(ENGINE_TC_EMULATE)
  emu_block->bar.wait();
#endif
}

// The named barrier of warps 2 pair and 2 pair + 1 (barrier 0 is __syncthreads').
__host__ __device__ __forceinline__ void pair_sync(int pair) {
#ifdef __CUDA_ARCH__
  asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
#elif defined(ENGINE_TC_EMULATE)
  emu_block->pair_bar[pair].wait();
#endif
}

// cp.async of kBytes (4, 8 or 16); on the host a plain copy (complete at once).
template <int kBytes>
__host__ __device__ __forceinline__ void copy_async(void* dst, const void* src) {
#ifdef __CUDA_ARCH__
  __pipeline_memcpy_async(dst, src, kBytes);
#else
  std::memcpy(dst, src, kBytes);
#endif
}
__host__ __device__ __forceinline__ void copy16(void* dst, const void* src) { copy_async<16>(dst, src); }
__host__ __device__ __forceinline__ void copies_commit() {
#ifdef __CUDA_ARCH__
  __pipeline_commit();
#endif
}
__host__ __device__ __forceinline__ void copies_wait_all() {
#ifdef __CUDA_ARCH__
  __pipeline_wait_prior(0);
#endif
}

}  // inline namespace ENGINE_TC_ABI
}  // namespace engine::custom::tc

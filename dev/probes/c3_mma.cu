// LeNet-5's c3 alone (6x14x14 -> 16x10x10, 5x5, then tanh) as an implicit
// GEMM on the tensor cores, `mma.sync.m16n8k16` with fp16 operands and fp32 sums, the A operand read
// by `ldmatrix` straight from channels-last activations: a row of A is one output pixel, K is ordered
// tap by tap with the 8 (6 + 2 zero) channels of a tap contiguous, so each 8-element row piece of an
// A tile is 16 contiguous bytes of the input ([y][x][8 channels]) and no im2col copy is made. K = 25
// taps x 8 = 200, padded to 13 k-tiles of 16 (zero weights); M = 100 pixels padded to 7 m-tiles; N =
// 16 channels, 2 n-tiles. The weights' fragments stay in registers for the whole launch; each warp
// runs one image at a time, the next image's input loading by cp.async meanwhile.
//
// The question before the tensor-core chain (engine/custom/fused/tc_chain.cuh) was written: how
// fast is c3 with this layout, and is it then bound by the tensor cores, shared memory or DRAM (the
// `memory` variant does the same loads and stores with no mma)? It uses the product's warp-level
// operations (tc_warp.cuh); the kernel around them is this probe's own. docs/design/ (the fused GPU paths) records the results.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. dev/probes/c3_mma.cu -o /tmp/c3_mma && /tmp/c3_mma
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/custom/fused/tc_warp.cuh"  // ldmatrix_x4, mma_16816
#include "probe_support.cuh"  // CK

namespace tc = engine::custom::tc;

constexpr int kH = 14, kW = 14, kC = 8;          // input, channels-last, 6 real channels
constexpr int kOH = 10, kOW = 10, kOC = 16, kK = 5;
constexpr int kTaps = kK * kK;                    // 25
constexpr int kKTiles = 13;                       // ceil(25 * 8 / 16)
constexpr int kMTiles = 7;                        // ceil(100 / 16)
constexpr int kWPitch = 216;                      // halfs per weight row: 432 B, ldmatrix rows on distinct banks
constexpr int kImageHalfs = kH * kW * kC;         // 1,568 halfs = 3,136 B
constexpr int kWarps = 4;

// Copies one image's input (3,136 B) into a warp's buffer, 16 B per copy.
__device__ __forceinline__ void request_image(const __half* src, __half* dst, int lane) {
  for (int i = lane; i < kImageHalfs / 8; i += 32) __pipeline_memcpy_async(dst + 8 * i, src + 8 * i, 16);
  __pipeline_commit();
}

// y[n][pixel][channel] (fp16, channels-last: what the next layer would read) = tanh(bias + c3(x)).
template <bool kMma>
__global__ void __launch_bounds__(kWarps * 32) c3_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                                                          const float* __restrict__ bias, __half* __restrict__ y, int n) {
  __shared__ __align__(16) __half s_w[kOC * kWPitch];
  __shared__ __align__(16) __half s_in[kWarps][2][kImageHalfs];
  __shared__ int s_tap[2 * kKTiles];  // halfs from a pixel's window origin to tap t's 8 channels
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < kOC * kWPitch / 8; i += blockDim.x) {
    const int row = i / (kWPitch / 8), col = 8 * (i % (kWPitch / 8));
    if (col < kKTiles * 16) __pipeline_memcpy_async(&s_w[row * kWPitch + col], &w[row * kKTiles * 16 + col], 16);
  }
  __pipeline_commit();
  if (threadIdx.x < 2 * kKTiles) {
    const int t = min(int(threadIdx.x), kTaps - 1);  // tap 25 (K 200..207) has zero weights: any valid address
    s_tap[threadIdx.x] = ((t / kK) * kW + t % kK) * kC;
  }
  const int stride = gridDim.x * kWarps;
  int img = blockIdx.x * kWarps + warp;
  if (img < n) request_image(x + size_t(img) * kImageHalfs, s_in[warp][0], lane);
  __pipeline_wait_prior(img < n ? 1 : 0);  // the weights (this thread's copies)
  __syncthreads();
  // B fragments for every k-tile and both n-tiles: matrix q of ldmatrix.x4 is n rows 8 * (q / 2) ..,
  // k 16 kt + 8 * (q % 2) ..; lane l addresses row l % 8 of matrix l / 8.
  unsigned b[kKTiles][4];
  {
    const int q = lane / 8, r = lane % 8;
#pragma unroll
    for (int kt = 0; kt < kKTiles; ++kt)
      tc::ldmatrix_x4(&s_w[(8 * (q / 2) + r) * kWPitch + 16 * kt + 8 * (q % 2)], b[kt][0], b[kt][1], b[kt][2],
                      b[kt][3]);
  }
  // This lane's A row (ldmatrix.x4: matrix q = rows 8 * (q % 2) .., k half q / 2) in each m-tile.
  const int a_row = 8 * ((lane / 8) % 2) + lane % 8, a_khalf = lane / 16;
  for (int buf = 0; img < n; img += stride, buf ^= 1) {
    const int next = img + stride;
    if (next < n) request_image(x + size_t(next) * kImageHalfs, s_in[warp][buf ^ 1], lane);
    __pipeline_wait_prior(next < n ? 1 : 0);
    __syncwarp();
    const __half* in = s_in[warp][buf];
    __half* out = y + size_t(img) * (kOH * kOW) * kOC;
    for (int mt = 0; mt < kMTiles; ++mt) {
      const int m = min(16 * mt + a_row, kOH * kOW - 1);  // rows past 100 repeat pixel 99 (dropped)
      const __half* origin = in + ((m / kOW) * kW + m % kOW) * kC;
      float acc[2][4] = {};
      if constexpr (kMma) {
#pragma unroll
        for (int kt = 0; kt < kKTiles; ++kt) {
          unsigned a0, a1, a2, a3;
          tc::ldmatrix_x4(origin + s_tap[2 * kt + a_khalf], a0, a1, a2, a3);
          tc::mma_16816<__half>(acc[0], a0, a1, a2, a3, b[kt][0], b[kt][1]);
          tc::mma_16816<__half>(acc[1], a0, a1, a2, a3, b[kt][2], b[kt][3]);
        }
      } else {  // the same reads of the input, no tensor-core work
#pragma unroll
        for (int kt = 0; kt < kKTiles; ++kt) {
          unsigned a0, a1, a2, a3;
          tc::ldmatrix_x4(origin + s_tap[2 * kt + a_khalf], a0, a1, a2, a3);
          acc[0][0] += __uint_as_float(a0 ^ a1 ^ a2 ^ a3 ^ b[kt][0] ^ b[kt][2]) * 0.0f;
        }
      }
      // C fragment: rows (pixels) 16 mt + lane / 4 (+ 8), channels 8 j + 2 (lane % 4) (+ 1).
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int ch = 8 * j + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int p = 16 * mt + lane / 4 + 8 * h;
          if (p < kOH * kOW) {
            const __half2 v = __floats2half2_rn(tanhf(acc[j][2 * h] + bias[ch]), tanhf(acc[j][2 * h + 1] + bias[ch + 1]));
            *reinterpret_cast<__half2*>(out + p * kOC + ch) = v;
          }
        }
      }
    }
    __syncwarp();  // the buffer is requested again two images on
  }
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 65536;
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::mt19937 rng(15);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  // Inputs and weights rounded to fp16 once; the reference sums those values in double.
  std::vector<__half> hx(size_t(n) * kImageHalfs), hw(size_t(kOC) * kKTiles * 16);
  std::vector<float> xf(hx.size()), wf(hw.size()), hb(kOC);
  for (size_t i = 0; i < hx.size(); ++i) {
    const float v = (i % kC) < 6 ? uni(rng) : 0.0f;
    hx[i] = __float2half_rn(v);
    xf[i] = __half2float(hx[i]);
  }
  for (int o = 0; o < kOC; ++o)
    for (int k = 0; k < kKTiles * 16; ++k) {
      const int tap = k / kC, c = k % kC;
      const float v = tap < kTaps && c < 6 ? 0.2f * uni(rng) : 0.0f;
      hw[o * kKTiles * 16 + k] = __float2half_rn(v);
      wf[o * kKTiles * 16 + k] = __half2float(hw[o * kKTiles * 16 + k]);
    }
  for (auto& v : hb) v = 0.1f * uni(rng);
  __half *dx, *dw, *dy;
  float* db;
  const size_t out_halfs = size_t(n) * kOH * kOW * kOC;
  CK(cudaMalloc(&dx, hx.size() * sizeof(__half)));
  CK(cudaMalloc(&dw, hw.size() * sizeof(__half)));
  CK(cudaMalloc(&db, hb.size() * sizeof(float)));
  CK(cudaMalloc(&dy, out_halfs * sizeof(__half)));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(__half), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size() * sizeof(__half), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemset(dy, 0xff, out_halfs * sizeof(__half)));  // NaN poison: every output must be written

  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, c3_kernel<true>, kWarps * 32, 0));
  const int blocks = std::min(per_sm * sms, (n + kWarps - 1) / kWarps);
  c3_kernel<true><<<blocks, kWarps * 32>>>(dx, dw, db, dy, n);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  // Check: every output of a spread of images (first, last, strided) against the double reference.
  std::vector<__half> hy(out_halfs);
  CK(cudaMemcpy(hy.data(), dy, out_halfs * sizeof(__half), cudaMemcpyDeviceToHost));
  double max_err = 0.0;
  long checked = 0, bad = 0;
  for (int img = 0; img < n; img += std::max(1, n / 257)) {
    for (int which = 0; which < 2; ++which) {
      const int i = which == 0 ? img : n - 1 - img;
      for (int oy = 0; oy < kOH; ++oy)
        for (int ox = 0; ox < kOW; ++ox)
          for (int o = 0; o < kOC; ++o) {
            double s = hb[o];
            for (int ky = 0; ky < kK; ++ky)
              for (int kx = 0; kx < kK; ++kx)
                for (int c = 0; c < 6; ++c)
                  s += double(xf[size_t(i) * kImageHalfs + ((oy + ky) * kW + ox + kx) * kC + c]) *
                       wf[o * kKTiles * 16 + (ky * kK + kx) * kC + c];
            const double want = std::tanh(s);
            const double got = __half2float(hy[size_t(i) * kOH * kOW * kOC + (oy * kOW + ox) * kOC + o]);
            const double err = std::fabs(got - want);
            if (!(err <= 2e-3)) ++bad;  // fp16 output: half an ulp near 1 is 2.4e-4; fp32 sums of fp16 products
            max_err = std::max(max_err, std::isnan(err) ? 1e30 : err);
            ++checked;
          }
    }
  }
  std::printf("c3 mma probe on %s (%d SMs), %d images, %d blocks of %d warps: check %s (%ld outputs, max |err| %.3g, %ld over 2e-3)\n",
              prop.name, sms, n, blocks, kWarps, bad == 0 ? "ok" : "FAILED", checked, max_err, bad);

  // Timing: 5 warm-up launches, then 30 timed one by one with events; median and range.
  auto time_variant = [&](bool mma, const char* name) {
    std::vector<float> ms;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int r = 0; r < 35; ++r) {
      CK(cudaEventRecord(a));
      if (mma) c3_kernel<true><<<blocks, kWarps * 32>>>(dx, dw, db, dy, n);
      else c3_kernel<false><<<blocks, kWarps * 32>>>(dx, dw, db, dy, n);
      CK(cudaGetLastError());
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float t = 0.0f;
      CK(cudaEventElapsedTime(&t, a, b));
      if (r >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double bytes = double(n) * (kImageHalfs + kOH * kOW * kOC) * sizeof(__half);
    std::printf("%-7s median %.4f ms (min %.4f, max %.4f): %.1f M images/s, %.1f TFLOP/s useful (c3: 240,000 MACs per image), "
                "%.2f TB/s of input + output\n",
                name, med, ms.front(), ms.back(), n / med / 1e3, 2.0 * 240000 * n / med / 1e9, bytes / med / 1e9);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
  };
  time_variant(true, "mma");
  time_variant(false, "memory");
  CK(cudaFree(dx));
  CK(cudaFree(dw));
  CK(cudaFree(db));
  CK(cudaFree(dy));
  return bad == 0 ? 0 : 1;
}

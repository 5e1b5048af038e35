#include "engine/custom/conv2d.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "engine/custom/device_math.cuh"
#include "engine/gpu/cuda_check.hpp"

namespace engine::custom {
namespace {

constexpr int kTargetThreads = 256;
constexpr int64_t kSharedTargetBytes = 24 * 1024;  // preferred staging size (occupancy)

template <int OCG>
__global__ void conv2d_forward_tiled_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ bias, float* __restrict__ y, int n,
                                            Conv2dShape s, Conv2dLaunch l, Activation act) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const int tid = tx + l.tile_w * (ty + l.tile_h * tz);
  const int nthreads = l.tile_w * l.tile_h * l.oz;
  const int patch = l.patch_h * l.patch_w;
  const int khw = s.kernel_h * s.kernel_w;
  float* in_s = smem;                                   // [cn][patch_h][patch_w]
  float* w_s = smem + size_t(l.channels_per_chunk) * patch;  // [oz * OCG][cn][kh][kw]

  const int64_t tiles = int64_t(l.tiles_x) * l.tiles_y;
  const int64_t work = int64_t(n) * tiles;
  // Every loop bound below depends on blockIdx only: each __syncthreads is reached by all threads.
  for (int64_t bt = blockIdx.x; bt < work; bt += gridDim.x) {
    const int64_t b = bt / tiles;
    const int tile = int(bt - b * tiles);
    const int oy0 = (tile / l.tiles_x) * l.tile_h;
    const int ox0 = (tile % l.tiles_x) * l.tile_w;
    const int iy0 = oy0 * s.stride_h - s.pad_top;
    const int ix0 = ox0 * s.stride_w - s.pad_left;
    const int oy = oy0 + ty, ox = ox0 + tx;
    const bool pixel_inside = oy < s.out_height && ox < s.out_width;
    const float* xb = x + b * int64_t(s.channels) * s.height * s.width;

    for (int g = blockIdx.y; g < l.oc_groups; g += gridDim.y) {
      const int oc_block = g * l.oz * OCG;       // first output channel of the block
      const int oc_thread = oc_block + tz * OCG;  // first output channel of this thread
      double acc[OCG];
#pragma unroll
      for (int k = 0; k < OCG; ++k) {
        const int oc = oc_thread + k;
        acc[k] = (bias != nullptr && oc < s.out_channels) ? double(bias[oc]) : 0.0;
      }

      for (int c0 = 0; c0 < s.channels; c0 += l.channels_per_chunk) {
        const int cn = min(l.channels_per_chunk, s.channels - c0);
        const int wchunk = cn * khw;  // filter floats per output channel in this chunk
        __syncthreads();  // the previous chunk (or tile) is no longer being read
        for (int e = tid; e < cn * patch; e += nthreads) {
          const int ci = e / patch;
          const int r = e - ci * patch;
          const int py = r / l.patch_w;
          const int px = r - py * l.patch_w;
          const int iy = iy0 + py, ix = ix0 + px;
          float v = 0.0f;  // zero padding (and rows past the input that no stored output reads)
          if (iy >= 0 && iy < s.height && ix >= 0 && ix < s.width)
            v = xb[(int64_t(c0 + ci) * s.height + iy) * s.width + ix];
          in_s[e] = v;
        }
        for (int e = tid; e < l.oz * OCG * wchunk; e += nthreads) {
          const int o = e / wchunk;
          const int r = e - o * wchunk;  // ci * khw + p * kw + q
          const int oc = oc_block + o;
          w_s[e] = oc < s.out_channels ? w[(int64_t(oc) * s.channels + c0) * khw + r] : 0.0f;
        }
        __syncthreads();

        if (pixel_inside) {
          const float* wt = w_s + tz * OCG * wchunk;
          for (int ci = 0; ci < cn; ++ci) {
            const float* in_c = in_s + ci * patch + (ty * s.stride_h) * l.patch_w + tx * s.stride_w;
            const float* w_c = wt + ci * khw;
            for (int p = 0; p < s.kernel_h; ++p) {
              for (int q = 0; q < s.kernel_w; ++q) {
                const double xv = double(in_c[p * l.patch_w + q]);
                const int widx = p * s.kernel_w + q;
#pragma unroll
                for (int k = 0; k < OCG; ++k) acc[k] = fma(xv, double(w_c[k * wchunk + widx]), acc[k]);
              }
            }
          }
        }
      }

      if (pixel_inside) {
#pragma unroll
        for (int k = 0; k < OCG; ++k) {
          const int oc = oc_thread + k;
          if (oc < s.out_channels)
            y[((b * s.out_channels + oc) * s.out_height + oy) * s.out_width + ox] =
                apply_activation(float(acc[k]), act);
        }
      }
    }
  }
}

// One thread per output element, straight from global memory: for windows too large to stage.
__global__ void conv2d_forward_direct_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                             const float* __restrict__ bias, float* __restrict__ y, int n,
                                             Conv2dShape s, Activation act) {
  const int64_t total = int64_t(n) * s.out_channels * s.out_height * s.out_width;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int ox = int(i % s.out_width);
    int64_t t = i / s.out_width;
    const int oy = int(t % s.out_height);
    t /= s.out_height;
    const int oc = int(t % s.out_channels);
    const int64_t b = t / s.out_channels;
    const int top = oy * s.stride_h - s.pad_top, left = ox * s.stride_w - s.pad_left;
    const int p0 = max(0, -top), p1 = min(s.kernel_h, s.height - top);
    const int q0 = max(0, -left), q1 = min(s.kernel_w, s.width - left);
    double acc = bias != nullptr ? double(bias[oc]) : 0.0;
    for (int c = 0; c < s.channels; ++c) {
      const float* xc = x + (b * s.channels + c) * int64_t(s.height) * s.width;
      const float* wc = w + (int64_t(oc) * s.channels + c) * s.kernel_h * s.kernel_w;
      for (int p = p0; p < p1; ++p)
        for (int q = q0; q < q1; ++q)
          acc = fma(double(xc[int64_t(top + p) * s.width + left + q]), double(wc[p * s.kernel_w + q]), acc);
    }
    y[i] = apply_activation(float(acc), act);
  }
}

int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

}  // namespace

Conv2dLaunch conv2d_plan(const Conv2dShape& s, const DeviceLimits& limits) {
  constexpr int OCG = kConvOcPerThread;
  Conv2dLaunch l;
  const int64_t khw = int64_t(s.kernel_h) * s.kernel_w;
  const int oc_per_thread_groups = ceil_div(s.out_channels, OCG);

  // Spatial tile: up to 32 columns, up to kTargetThreads pixels, balanced so the last tile is not
  // mostly empty (28 rows -> 4 tiles of 7, not 3 of 9 and one of 1).
  int tile_w_max = 32, tile_h_max = std::max(1, kTargetThreads / std::min(32, s.out_width));
  int oz_max = 64;  // blockDim.z limit
  for (;;) {
    l.tiles_x = ceil_div(s.out_width, tile_w_max);
    l.tile_w = ceil_div(s.out_width, l.tiles_x);
    l.tiles_y = ceil_div(s.out_height, tile_h_max);
    l.tile_h = ceil_div(s.out_height, l.tiles_y);
    const int pixels = l.tile_w * l.tile_h;
    l.oz = std::clamp(std::min(oc_per_thread_groups, kTargetThreads / pixels), 1, oz_max);
    l.oc_groups = ceil_div(oc_per_thread_groups, l.oz);
    l.oz = ceil_div(oc_per_thread_groups, l.oc_groups);
    const int64_t patch_h = int64_t(l.tile_h - 1) * s.stride_h + s.kernel_h;
    const int64_t patch_w = int64_t(l.tile_w - 1) * s.stride_w + s.kernel_w;
    const int64_t per_channel_bytes = (patch_h * patch_w + int64_t(l.oz) * OCG * khw) * int64_t(sizeof(float));
    if (per_channel_bytes <= int64_t(limits.shared_per_block)) {
      l.patch_h = int(patch_h);
      l.patch_w = int(patch_w);
      l.channels_per_chunk =
          int(std::clamp<int64_t>(kSharedTargetBytes / per_channel_bytes, 1, s.channels));
      l.shared_bytes = size_t(l.channels_per_chunk * per_channel_bytes);
      l.tiled = true;
      return l;
    }
    // Too large for one channel: fewer output channels per block, then smaller tiles.
    if (l.oz > 1) oz_max = 1;
    else if (l.tile_h > 1) tile_h_max = std::max(1, l.tile_h / 2);
    else if (l.tile_w > 1) tile_w_max = std::max(1, l.tile_w / 2);
    else break;
  }
  l = Conv2dLaunch{};
  l.tiled = false;
  l.threads = 256;
  l.max_blocks = std::max(limits.multiprocessors, 1) * 32;
  return l;
}

void conv2d_forward(const Conv2dArgs& a, const Conv2dLaunch& l, int n, cudaStream_t stream,
                    const std::string& context) {
  if (n <= 0) return;
  if (l.tiled) {
    const int64_t work = int64_t(n) * l.tiles_x * l.tiles_y;
    const dim3 grid(unsigned(std::min<int64_t>(work, INT_MAX)), unsigned(std::min(l.oc_groups, 65535)));
    const dim3 block(unsigned(l.tile_w), unsigned(l.tile_h), unsigned(l.oz));
    conv2d_forward_tiled_kernel<kConvOcPerThread><<<grid, block, l.shared_bytes, stream>>>(
        a.x, a.weight, a.bias, a.y, n, a.shape, l, a.activation);
  } else {
    const int64_t total = int64_t(n) * a.shape.out_channels * a.shape.out_height * a.shape.out_width;
    const int blocks = int(std::max<int64_t>(1, std::min<int64_t>((total + l.threads - 1) / l.threads, l.max_blocks)));
    conv2d_forward_direct_kernel<<<blocks, l.threads, 0, stream>>>(a.x, a.weight, a.bias, a.y, n, a.shape,
                                                                   a.activation);
  }
  CUDA_CHECK_LAUNCH(context);
}

}  // namespace engine::custom

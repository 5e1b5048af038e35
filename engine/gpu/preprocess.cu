#include "engine/gpu/cuda_check.hpp"
#include "engine/gpu/preprocess.hpp"

namespace engine::gpu {

// One thread per output element; a grid-stride loop covers any batch.
__global__ void preprocess_uint8_kernel(const uint8_t* __restrict__ raw, float* __restrict__ out,
                                        long long total, PreprocessShape p) {
  const int out_h = p.height + p.pad_top + p.pad_bottom;
  const int out_w = p.width + p.pad_left + p.pad_right;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const int x = int(i % out_w);
    const int y = int((i / out_w) % out_h);
    const long long plane = i / ((long long)out_w * out_h);  // sample * C + channel
    const int c = int(plane % p.channels);
    const int sy = y - p.pad_top, sx = x - p.pad_left;
    float v = p.pad_value;
    if (sy >= 0 && sy < p.height && sx >= 0 && sx < p.width) {
      const float pixel = float(raw[(plane * p.height + sy) * p.width + sx]);
      // Explicit rounding steps: no fused multiply-add, so the result is bitwise the CPU's.
      v = __fdiv_rn(__fsub_rn(__fmul_rn(pixel, p.scale), p.mean[c]), p.std[c]);
    }
    out[i] = v;
  }
}

void preprocess_uint8(const uint8_t* raw, float* out, int n, const PreprocessShape& shape,
                      cudaStream_t stream) {
  const long long total = (long long)n * shape.channels * (shape.height + shape.pad_top + shape.pad_bottom) *
                          (shape.width + shape.pad_left + shape.pad_right);
  if (total == 0) return;
  const int threads = 256;
  const long long want = (total + threads - 1) / threads;
  const int blocks = int(want < 65535 * 8 ? want : 65535 * 8);
  preprocess_uint8_kernel<<<blocks, threads, 0, stream>>>(raw, out, total, shape);
  CUDA_CHECK_LAUNCH("preprocess (uint8 → float32)");
}

}  // namespace engine::gpu

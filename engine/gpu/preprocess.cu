#include "engine/gpu/cuda_check.hpp"
#include "engine/gpu/preprocess.hpp"

namespace engine::gpu {

// One block per plane (a sample's channel) at a time, its threads over the plane's padded
// elements: 32-bit index arithmetic, one division by the row width per element (64-bit divisions
// per element would make the kernel as slow as the upload it follows in a pipelined stream).
__global__ void preprocess_uint8_kernel(const uint8_t* __restrict__ raw, float* __restrict__ out, long long planes,
                                        PreprocessShape p) {
  const int out_h = p.height + p.pad_top + p.pad_bottom;
  const int out_w = p.width + p.pad_left + p.pad_right;
  const int plane_out = out_h * out_w, plane_in = p.height * p.width;
  for (long long plane = blockIdx.x; plane < planes; plane += gridDim.x) {  // plane = sample * C + channel
    const int c = int(plane % p.channels);
    const float mean = p.mean[c], std_dev = p.std[c];
    const uint8_t* src = raw + plane * plane_in;
    float* dst = out + plane * plane_out;
    for (int e = threadIdx.x; e < plane_out; e += blockDim.x) {
      const int y = e / out_w, x = e - y * out_w;
      const int sy = y - p.pad_top, sx = x - p.pad_left;
      float v = p.pad_value;
      if (sy >= 0 && sy < p.height && sx >= 0 && sx < p.width) {
        const float pixel = float(src[sy * p.width + sx]);
        // Explicit rounding steps: no fused multiply-add, so the result is bitwise the CPU's.
        v = __fdiv_rn(__fsub_rn(__fmul_rn(pixel, p.scale), mean), std_dev);
      }
      dst[e] = v;
    }
  }
}

void preprocess_uint8(const uint8_t* raw, float* out, int n, const PreprocessShape& shape,
                      cudaStream_t stream) {
  const long long planes = (long long)n * shape.channels;
  if (planes == 0) return;
  const long long plane_out =
      (long long)(shape.height + shape.pad_top + shape.pad_bottom) * (shape.width + shape.pad_left + shape.pad_right);
  if (plane_out > (1LL << 30)) throw CudaError("preprocess (uint8 → float32): an input plane is too large");
  const int threads = plane_out >= 256 ? 256 : 128;
  const int blocks = int(planes < (1LL << 20) ? planes : (1LL << 20));
  preprocess_uint8_kernel<<<blocks, threads, 0, stream>>>(raw, out, planes, shape);
  CUDA_CHECK_LAUNCH("preprocess (uint8 → float32)");
}

}  // namespace engine::gpu

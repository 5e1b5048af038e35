// Compiled with -ffp-contract=off (CMakeLists.txt): x * scale - mean must round after the multiply,
// exactly as the GPU preprocessing kernel does with __fmul_rn/__fsub_rn, so both are bitwise equal.
#include "engine/reference/ops.hpp"

namespace engine::reference {

void preprocess_uint8(const uint8_t* raw, Dims3 raw_dims, const formats::Preprocess& p, float* out) {
  const int out_h = raw_dims.height + p.pad_top + p.pad_bottom;
  const int out_w = raw_dims.width + p.pad_left + p.pad_right;
  for (int c = 0; c < raw_dims.channels; ++c) {
    const float mean = p.mean[c], std = p.std[c];
    float* plane = out + int64_t(c) * out_h * out_w;
    const uint8_t* src = raw + int64_t(c) * raw_dims.height * raw_dims.width;
    for (int y = 0; y < out_h; ++y) {
      const int sy = y - p.pad_top;
      for (int x = 0; x < out_w; ++x) {
        const int sx = x - p.pad_left;
        float v = p.pad_value;
        if (sy >= 0 && sy < raw_dims.height && sx >= 0 && sx < raw_dims.width) {
          const float scaled = float(src[sy * raw_dims.width + sx]) * p.scale;
          const float centred = scaled - mean;
          v = centred / std;
        }
        plane[int64_t(y) * out_w + x] = v;
      }
    }
  }
}

}  // namespace engine::reference

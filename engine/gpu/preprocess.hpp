#pragma once
// uint8 pixels → the float32 tensor the first node sees: (x * scale - mean[c]) / std[c], with a
// constant border (model-format-v1.md, "Input and preprocessing"). Shared by both GPU backends.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace engine::gpu {

struct PreprocessShape {
  int channels = 1, height = 0, width = 0;  // raw sample
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  float scale = 1.0f, pad_value = 0.0f;
  const float* mean = nullptr;  // device arrays, one entry per channel
  const float* std = nullptr;
};

// raw: [n, C, H, W] uint8 on the device; out: [n, C, H+pt+pb, W+pl+pr] float32 on the device.
void preprocess_uint8(const uint8_t* raw, float* out, int n, const PreprocessShape& shape,
                      cudaStream_t stream);

}  // namespace engine::gpu

#pragma once
// Conversions at the edges of a reduced-precision executable: the float32 input value (as the
// preprocessing or the upload leaves it, NCHW) into the executable's storage type and layout, and
// its outputs back into float32 NCHW for the download. Round to nearest even (the conversion
// instructions' default), NaN kept. Shared by the GPU backends; no library has this call (cuDNN's
// cudnnTransformTensor keeps the data type).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace engine::gpu {

enum class StorageType { F32, F16, BF16 };

// A value of n samples, each [channels, pixels] in NCHW (pixels = H * W; 1 for vectors).
struct ValueShape {
  int64_t n = 0;
  int channels = 1, pixels = 1;
};

// out[n, pixels, channels] (nhwc) or out[n, channels, pixels] = in[n, channels, pixels], converted.
void convert_from_f32(const float* in, void* out, StorageType type, bool nhwc, const ValueShape& shape,
                      cudaStream_t stream);
// out[n, channels, pixels] = in[n, pixels, channels] (nhwc) or in[n, channels, pixels], widened.
void convert_to_f32(const void* in, StorageType type, bool nhwc, float* out, const ValueShape& shape,
                    cudaStream_t stream);

}  // namespace engine::gpu

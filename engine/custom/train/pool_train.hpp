#pragma once
// avgpool and maxpool for training, fp32, in host_ops.hpp's orders. Backward passes gather: one
// thread per input element adds the gradients of the outputs whose window covers it, in the
// row-major output order the host's scatter adds them, so the sums match its order exactly.
#include <cuda_runtime_api.h>

#include "engine/gpu/train/train_launch.hpp"

namespace engine::custom::train {

// The GPU trainers' shared part (engine/gpu/train).
using gpu::train::WindowGeom;

void avgpool_forward(const float* x, float* y, int n, const WindowGeom& g, cudaStream_t stream);
void avgpool_backward(const float* dy, float* dx, int n, const WindowGeom& g, bool accumulate, cudaStream_t stream);

// argmax[s, c, i, j]: index within the sample's input of the window's first maximum (a later equal
// value does not replace it; padded positions never win), -1 for an empty window. Kept for the
// backward pass, which sends each output's gradient to that element.
void maxpool_forward(const float* x, float* y, int* argmax, int n, const WindowGeom& g, cudaStream_t stream);
void maxpool_backward(const float* dy, const int* argmax, float* dx, int n, const WindowGeom& g, bool accumulate,
                      cudaStream_t stream);

}  // namespace engine::custom::train

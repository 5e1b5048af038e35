#pragma once
// The weight-free element-wise ops for training (relu/tanh/sigmoid, add, concat, softmax) and
// scale_shift, fp32, with host_ops.hpp's formulas and orders. "accumulate": start from the gradient
// buffer's contents (another consumer of the value wrote first), else from zero.
#include <cuda_runtime_api.h>

namespace engine::gpu::train {

enum class Pointwise : int { Relu = 0, Tanh = 1, Sigmoid = 2 };

// count = n * elements per sample.
void activation_forward(Pointwise op, const float* x, float* y, long long count, cudaStream_t stream);
// PyTorch's derivatives: relu' = 1 where x > 0, tanh' = 1 - y^2, sigmoid' = (1 - y) * y.
void activation_backward(Pointwise op, const float* x, const float* y, const float* dy, float* dx, long long count,
                         bool accumulate, cudaStream_t stream);

void add_forward(const float* a, const float* b, float* y, long long count, cudaStream_t stream);
// dx (+)= dy over `count` elements (add's backward, one input at a time).
void add_gradient(const float* dy, float* dx, long long count, bool accumulate, cudaStream_t stream);

// Concat of per-sample blocks: part [n, part_elements] is at column `offset` of [n, total_elements].
void concat_forward(const float* part, float* y, int n, long long part_elements, long long offset,
                    long long total_elements, cudaStream_t stream);
void concat_backward(const float* dy, float* dpart, int n, long long part_elements, long long offset,
                     long long total_elements, bool accumulate, cudaStream_t stream);

// scale_shift: per sample, `channels` blocks of `inner` elements; y = x * scale[c] + shift[c].
void scale_shift_forward(const float* x, const float* scale, const float* shift, float* y, int n, long long channels,
                         long long inner, cudaStream_t stream);
void scale_shift_backward_input(const float* dy, const float* scale, float* dx, int n, long long channels,
                                long long inner, bool accumulate, cudaStream_t stream);
// dscale[c] = sum of dy * x, dshift[c] = sum of dy over samples and elements: one block per channel,
// strided partial sums then the fixed tree (block_reduce.cuh). Overwrites.
void scale_shift_backward_params(const float* x, const float* dy, float* dscale, float* dshift, int n,
                                 long long channels, long long inner, cudaStream_t stream);

// A softmax node that is not the loss (the loss's softmax is fused into it): one thread per sample.
void softmax_forward(const float* x, float* y, int n, long long k, cudaStream_t stream);
void softmax_backward(const float* y, const float* dy, float* dx, int n, long long k, bool accumulate,
                      cudaStream_t stream);

}  // namespace engine::gpu::train

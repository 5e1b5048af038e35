#pragma once
// conv2d for training, fp32: forward, input gradient, weight and bias gradients (their summation
// orders: docs/design/training.md, "Determinism"). Every output element is computed by one thread (the
// weight and bias gradients: one block, a fixed-shape tree), so results are bitwise reproducible.
#include <cuda_runtime_api.h>

#include "engine/gpu/train/train_launch.hpp"

namespace engine::custom::train {

// The GPU trainers' shared part (engine/gpu/train).
using gpu::train::WindowGeom;

// y[s,o,i,j] = b[o] + sum over (c, p, q) ascending of x * w (padded taps skipped), as host_ops.hpp.
// act >= 0 (a Pointwise): y = act(that sum), the activation reading the conv folded in.
void conv_forward(const float* x, const float* w, const float* b, float* y, int n, const WindowGeom& g, int act,
                  cudaStream_t stream);

// dx[s,c,y,x] (+)= sum over taps (p, q) ascending of (sum over o ascending of w * dy), the host's order. accumulate: start from dx's contents
// (another consumer wrote there first), else from zero.
// With a folded activation (act >= 0), dy is the gradient of its output y = act_y and each term
// uses activation_grad(act, dy, y) (activation.cuh) in place of dy: the bits the activation's own
// backward kernel would have written.
void conv_backward_input(const float* dy, const float* act_y, int act, const float* w, float* dx, int n,
                         const WindowGeom& g, bool accumulate, cudaStream_t stream);

// dw[o,c,p,q] = sum over samples and output positions of dy * x; db[o] (may be null) of dy.
// Overwrites. Square kernels of side 1-5 (every conv of the models here): two stages. Stage 1 gives
// each (o, c) pair `chunks` blocks, each a contiguous range of samples; a thread walks its strided
// share of that range's (sample, position) pairs, computes the (activation's) gradient once and
// adds it times the kh x kw inputs under the window into kh*kw registers; one fixed tree per tap
// adds the block's 256 partial sums into `partials`. Stage 2 adds a weight's chunks in chunk
// order: dy is read and the activation gradient computed once per position, not once per tap as in
// one block per weight element, which other kernel shapes still take. The same shapes and orders
// for the same n: the same bits run after run.
// `partials` holds conv_param_partials(g, max_batch) floats.
long long conv_param_partials(const WindowGeom& g, int max_batch);
void conv_backward_params(const float* x, const float* dy, const float* act_y, int act, float* dw, float* db, int n,
                          const WindowGeom& g, float* partials, cudaStream_t stream);

}  // namespace engine::custom::train

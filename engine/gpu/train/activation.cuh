#pragma once
// relu / tanh / sigmoid and their derivatives, written once for the element-wise kernels and for
// the epilogues and operand loads they are folded into (conv2d and dense with the activation that
// reads them: gpu_trainer.cpp, "fusion"). The same float operations as host_ops.hpp, so folding
// changes no bit.
#include "engine/gpu/train/pointwise_train.hpp"

namespace engine::gpu::train {

// act < 0: none.
__device__ inline float activate(int act, float v) {
  if (act == int(Pointwise::Relu)) return v > 0.0f ? v : 0.0f;
  if (act == int(Pointwise::Tanh)) return tanhf(v);
  if (act == int(Pointwise::Sigmoid)) return 1.0f / (1.0f + expf(-v));
  return v;
}

// The gradient reaching the activation's input from dy = dL/dy, written from y = act(x): relu's
// x > 0 is y > 0 (y = x where x > 0, else 0). act < 0: dy itself.
__device__ inline float activation_grad(int act, float dy, float y) {
  if (act == int(Pointwise::Relu)) return y > 0.0f ? dy : 0.0f;
  if (act == int(Pointwise::Tanh)) return dy * (1.0f - y * y);
  if (act == int(Pointwise::Sigmoid)) return dy * (1.0f - y) * y;
  return dy;
}

}  // namespace engine::gpu::train

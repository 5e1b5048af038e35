// SGD and Adam on the device (fp32, --fmad=false; sqrtf and '/' are IEEE round-to-nearest by
// default: -prec-sqrt and -prec-div stay on).
#include <cmath>

#include "engine/gpu/train/optimizer_train.hpp"
#include "engine/gpu/train/train_launch.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::gpu::train {
namespace {

struct Consts {
  int adam, has_wd, has_momentum;
  float wd, momentum, b1, b2, one_b1, one_b2, eps;
};

__global__ void optimizer_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ s1,
                                 float* __restrict__ s2, long long count, Consts c,
                                 const StepScalars* __restrict__ scalars) {
  const StepScalars sc = *scalars;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    float g = grad[i];
    if (c.has_wd) g = g + c.wd * p[i];
    if (!c.adam) {
      if (c.has_momentum) {
        g = sc.first ? g : c.momentum * s1[i] + g;
        s1[i] = g;
      }
      p[i] = p[i] - sc.lr * g;
      continue;
    }
    const float m = s1[i] * c.b1 + g * c.one_b1;
    const float v = s2[i] * c.b2 + g * g * c.one_b2;
    s1[i] = m;
    s2[i] = v;
    p[i] = p[i] - sc.step_size * (m / (sqrtf(v) / sc.bc2_sqrt + c.eps));
  }
}

}  // namespace

StepScalars step_scalars(const OptimizerOptions& o, int64_t t) {
  StepScalars s{};
  s.lr = float(scheduled_lr(o, t));
  const double k = double(t + 1);
  s.step_size = float(scheduled_lr(o, t) / (1.0 - std::pow(o.beta1, k)));
  s.bc2_sqrt = float(std::sqrt(1.0 - std::pow(o.beta2, k)));
  s.first = t == 0 ? 1 : 0;
  return s;
}

void optimizer_step(const OptimizerOptions& o, float* params, const float* grads, float* state1, float* state2,
                    long long count, const StepScalars* scalars, cudaStream_t stream) {
  if (count <= 0) return;
  Consts c{};
  c.adam = o.kind == OptimizerKind::Adam ? 1 : 0;
  c.has_wd = o.weight_decay != 0 ? 1 : 0;
  c.has_momentum = o.momentum != 0 ? 1 : 0;
  c.wd = float(o.weight_decay);
  c.momentum = float(o.momentum);
  c.b1 = float(o.beta1);
  c.b2 = float(o.beta2);
  c.one_b1 = float(1.0 - o.beta1);
  c.one_b2 = float(1.0 - o.beta2);
  c.eps = float(o.eps);
  optimizer_kernel<<<grid_for(count), kThreads, 0, stream>>>(params, grads, state1, state2, count, c, scalars);
  CUDA_CHECK_LAUNCH("train: optimizer update");
}

}  // namespace engine::gpu::train

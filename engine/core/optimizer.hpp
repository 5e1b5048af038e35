#pragma once
// The optimisers and the learning-rate schedule, defined once for every backend: host backends
// call these functions; GPU backends must implement the same formulas, in the same order of
// operations (docs/design/training.md lists them). Each follows PyTorch 1.13's definition, defaults and
// update order (torch.optim.SGD and torch.optim.Adam, the single-tensor "for-loop" path).
//
// Learning rate of step t (t = steps taken before this one, 0 for the first):
//   inverse time (default), seed 003's decay (Keras' legacy `decay`): lr_t = lr / (1 + lr_decay * t);
//     lr_decay = 0 keeps lr constant.
//   cosine over T steps (torch.optim.lr_scheduler.CosineAnnealingLR stepped per batch, eta_min 0,
//     T_max = T): lr_t = lr * (1 + cos(pi * t / T)) / 2, and 0 from t = T on. With a linear warm-up
//     of W steps first (LambdaLR with the factor below, as scripts/train_seed_models.py trains):
//     lr_t = lr * (t + 1) / W for t < W, then the cosine over the remaining T - W steps at t - W.
//
// SGD (torch.optim.SGD, dampening 0, nesterov off):
//   g = grad + weight_decay * p
//   b = g                       on the first step (momentum > 0)
//   b = momentum * b + g        afterwards
//   p = p - lr_t * b            (b = g when momentum = 0)
// Adam (torch.optim.Adam, amsgrad off, L2 weight decay added to the gradient, not AdamW):
//   g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - (lr_t / (1 - beta1^k)) * m / (sqrt(v) / sqrt(1 - beta2^k) + eps),   k = t + 1
// Keras' Adam differs only in where eps goes (it adds eps to sqrt(v_hat) of its own bias
// correction of lr); the difference is below 1e-7 of a step for Keras' default eps 1e-7.
#include <cmath>
#include <cstdint>

namespace engine {

enum class OptimizerKind { SGD, Adam };
enum class LrSchedule { InverseTime, Cosine };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::SGD;
  double lr = 0.01;
  double lr_decay = 0.0;     // lr_t = lr / (1 + lr_decay * t)
  LrSchedule schedule = LrSchedule::InverseTime;
  int64_t cosine_steps = 0;  // T of the cosine schedule (the run's total steps)
  int64_t warmup_steps = 0;  // W: linear warm-up before the cosine (0 = none)
  double momentum = 0.0;     // SGD only
  double weight_decay = 0.0; // both: L2 added to the gradient
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam: PyTorch's defaults
};

inline double scheduled_lr(const OptimizerOptions& o, int64_t t) {
  if (o.schedule == LrSchedule::Cosine) {
    const int64_t w = o.warmup_steps;
    if (t < w) return o.lr * double(t + 1) / double(w);
    const int64_t span = o.cosine_steps - w;
    if (t - w >= span) return 0.0;
    return o.lr * 0.5 * (1.0 + std::cos(3.141592653589793 * double(t - w) / double(span)));
  }
  return o.lr / (1.0 + o.lr_decay * double(t));
}

// One update of n parameters. `state1` is SGD's momentum buffer or Adam's m, `state2` Adam's v
// (both zero-initialised, n each); t = steps taken before this one. T is the backend's parameter
// type (double on reference, float on cpu); scalars are formed in double and used in T, as
// PyTorch turns its Python floats into the tensor's type.
template <class T>
void optimizer_update(const OptimizerOptions& o, int64_t t, int64_t n, T* p, const T* grad, T* state1, T* state2) {
  const T lr = T(scheduled_lr(o, t));
  const T wd = T(o.weight_decay);
  if (o.kind == OptimizerKind::SGD) {
    const T mom = T(o.momentum);
    for (int64_t i = 0; i < n; ++i) {
      T g = grad[i];
      if (o.weight_decay != 0) g = g + wd * p[i];
      if (o.momentum != 0) {
        g = t == 0 ? g : mom * state1[i] + g;
        state1[i] = g;
      }
      p[i] = p[i] - lr * g;
    }
    return;
  }
  const double k = double(t + 1);
  const T b1 = T(o.beta1), b2 = T(o.beta2), one_b1 = T(1.0 - o.beta1), one_b2 = T(1.0 - o.beta2);
  const T step_size = T(scheduled_lr(o, t) / (1.0 - std::pow(o.beta1, k)));
  const T bc2_sqrt = T(std::sqrt(1.0 - std::pow(o.beta2, k)));
  const T eps = T(o.eps);
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (o.weight_decay != 0) g = g + wd * p[i];
    const T m = state1[i] * b1 + g * one_b1;
    const T v = state2[i] * b2 + g * g * one_b2;
    state1[i] = m;
    state2[i] = v;
    p[i] = p[i] - step_size * (m / (std::sqrt(v) / bc2_sqrt + eps));
  }
}

}  // namespace engine

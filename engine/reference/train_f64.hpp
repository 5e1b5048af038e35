#pragma once
// The reference backend's training: the host kernels (engine/train/host_ops.hpp) in float64
// throughout (parameters, activations, gradients, optimiser state), so that its gradients agree
// with finite differences and with PyTorch in float64 to ~1e-10. Parameters are rounded to float32
// only when read out (checkpoints, the trained model).
#include <memory>

#include "engine/core/train.hpp"

namespace engine::reference {

std::unique_ptr<TrainExecutable> make_trainer_f64(const Graph& graph, const TrainOptions& options);

}  // namespace engine::reference

#pragma once
// The cpu backend's training: the host kernels (engine/train/host_ops.hpp) in float32, built twice
// (train_f32_portable.cpp for any x86-64, train_f32_avx2.cpp with -mavx2), the AVX2 one picked at
// run time when the processor has it. Both are compiled with -ffp-contract=off and the kernels
// fix every sum's order, so both give bitwise the same parameters: the instruction set only
// changes how many lanes an axpy uses.
#include <memory>

#include "engine/core/train.hpp"

namespace engine::cpu {

std::unique_ptr<TrainExecutable> make_trainer_f32_portable(const Graph& graph, const TrainOptions& options);
std::unique_ptr<TrainExecutable> make_trainer_f32_avx2(const Graph& graph, const TrainOptions& options);

}  // namespace engine::cpu

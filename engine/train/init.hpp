#pragma once
// PyTorch's default initialisation of each layer (torch.nn.Conv2d/Linear reset_parameters), drawn
// from SplitMix64(seed) (random.hpp), tensors in plan order, weight before bias:
//   conv2d, dense weight: kaiming_uniform(a = sqrt(5)), i.e. U(-b, b) with b = gain * sqrt(3 / fan_in),
//                         gain = sqrt(2 / (1 + a^2)) = sqrt(1/3), so b = 1 / sqrt(fan_in)
//   conv2d, dense bias:   U(-1/sqrt(fan_in), 1/sqrt(fan_in))
//   scale_shift:          scale 1, shift 0 (BatchNorm's reset_parameters)
// fan_in = in_channels * kh * kw (conv2d) or the input size (dense). Each value is
// float(-b + 2 * b * u), u = SplitMix64::uniform(). The same distribution as PyTorch, not its
// numbers: PyTorch's generator is not reproduced.
//
// InitScheme::Keras is Keras' default instead (seed 002's CNN was a Keras model): weights
// glorot_uniform, U(-b, b) with b = sqrt(6 / (fan_in + fan_out)), fan_out = out_channels * kh * kw
// (conv2d) or units (dense); biases zero; scale_shift as above.
#include <cstdint>

#include "formats/model.hpp"

namespace engine::train {

enum class InitScheme { Torch, Keras };

void init_parameters(formats::Model& model, uint64_t seed, InitScheme scheme = InitScheme::Torch);

}  // namespace engine::train

#include "engine/train/init.hpp"

#include <cmath>

#include "engine/train/random.hpp"

namespace engine::train {

void init_parameters(formats::Model& model, uint64_t seed, InitScheme scheme) {
  SplitMix64 rng(init_stream(seed));
  for (formats::Node& node : model.nodes) {
    if (node.op == formats::OpType::ScaleShift) {
      for (float& v : node.weight->values) v = 1.0f;
      for (float& v : node.bias->values) v = 0.0f;
      continue;
    }
    if (node.op != formats::OpType::Conv2D && node.op != formats::OpType::Dense) continue;
    const formats::Shape& w = node.weight->shape;
    int64_t fan_in = 1;
    for (size_t d = 1; d < w.size(); ++d) fan_in *= w[d];
    const double bound = 1.0 / std::sqrt(double(fan_in));
    if (scheme == InitScheme::Keras) {
      const int64_t fan_out = w[0] * (fan_in / (w.size() == 4 ? w[1] : fan_in));  // O * kh * kw, or units
      const double glorot = std::sqrt(6.0 / double(fan_in + fan_out));
      for (float& v : node.weight->values) v = float(-glorot + 2.0 * glorot * rng.uniform());
      if (node.bias)
        for (float& v : node.bias->values) v = 0.0f;
      continue;
    }
    for (float& v : node.weight->values) v = float(-bound + 2.0 * bound * rng.uniform());
    if (node.bias)
      for (float& v : node.bias->values) v = float(-bound + 2.0 * bound * rng.uniform());
  }
}

}  // namespace engine::train

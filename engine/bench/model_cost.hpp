#pragma once
// What a model asks of the hardware per image, counted from the planned graph: multiply-adds and
// flops per node, the fewest bytes each node and the whole model must move, and the parameters.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"

namespace engine::bench {

struct NodeCost {
  std::string name, op;
  int64_t multiply_adds = 0;  // conv2d, dense
  double flops = 0;           // per image: 2 per multiply-add; pools 1 per window element; activations
                              // and add 1 per element; softmax 4 per element; flatten 0 (an alias)
  double bytes = 0;           // per image: inputs read once + output written once (float32)
  double weight_bytes = 0;    // per batch: parameters read once
};

struct ModelCost {
  int64_t multiply_adds = 0;     // per image, conv2d + dense
  double flops = 0;              // 2 x multiply_adds: what the FMA ceiling divides
  double raw_input_bytes = 0;    // one raw sample as uploaded (uint8 pixels, or float32)
  double input_value_bytes = 0;  // the preprocessed input value the first node reads (float32)
  double output_bytes = 0;       // every graph output (float32)
  double weight_bytes = 0;       // all parameters, read once per batch
  std::vector<NodeCost> nodes;   // in execution order
  // Fewest bytes through device memory per image: compute scope (preprocessed input read, outputs
  // written), end to end (raw input read, outputs written: preprocessing fused into the first
  // node), and over the host link (raw input in, outputs out).
  double device_bytes_compute() const { return input_value_bytes + output_bytes; }
  double device_bytes_e2e() const { return raw_input_bytes + output_bytes; }
  double link_bytes() const { return raw_input_bytes + output_bytes; }
};

ModelCost model_cost(const Graph& graph);

}  // namespace engine::bench

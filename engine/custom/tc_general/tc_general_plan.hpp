#pragma once
// The custom backend's tensor-core general path for --precision fp16 | bf16 (host side, no CUDA
// calls): the plan for the graphs it takes so far, chains of dense layers,
//
//   input -> [flatten] -> dense [-> act] -> ... -> dense [-> act] [-> softmax]      (act: relu, tanh, sigmoid)
//
// every dense layer one GEMM (tc_dense_gemm.hpp) with its activation in the epilogue, activations
// between layers stored in the 16-bit format (rows padded to 8 elements), the first layer rounding
// the preprocessed fp32 input while it stages it, the last writing fp32. Weights are packed here
// once into the kernel's layout. Any other graph is refused with the node and the reason; it runs
// the per-node tensor-core path (tc_gemm.hpp).
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/launch_common.hpp"

namespace engine::custom::tcg {

struct TcgLayer {
  int node = -1;            // the dense node (graph index)
  int in_features = 0, units = 0;
  Activation act = Activation::None;
  bool first = false, last = false;
  int ldx = 0;              // input row pitch: the first layer in_features (fp32), else the previous ldy
  int ldy = 0;              // output row pitch: 16-bit round_up(units, 8); the last layer units (fp32)
  int k_padded = 0;         // ldx rounded up to kTcgBk
  int rows_padded = 0;      // units rounded up to kTcgRowAlign
  std::vector<uint16_t> weight;  // [rows_padded][k_padded], fp16 or bf16 bits, zeros in the padding
  std::vector<float> bias;       // [rows_padded]
  std::string context;           // names the node and what runs in its epilogue
};

struct TcgPlan {
  bool bf16 = false;
  std::vector<TcgLayer> layers;
  int input_value = -1;
  int output_value = -1;    // the graph's one output
  int softmax_node = -1;    // >= 0: a softmax of the last layer's fp32 output writes the graph output
  std::vector<int> nodes;   // every node of the graph (one fusion group)
};

// The plan, or why this path does not take the graph (naming the node).
std::variant<TcgPlan, std::string> plan_tc_general(const Graph& graph, bool bf16);

}  // namespace engine::custom::tcg

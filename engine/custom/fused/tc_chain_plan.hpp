#pragma once
// Whether a graph is a member of the tensor-core chain's family (tc_chain_params.hpp), and its plan:
// the kernel parameters and the weights converted once to 16-bit, padded and laid out as the kernel
// reads them. Host code (no device calls): the emulated-warp tests plan with it too.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/fused/tc_chain_params.hpp"

namespace engine::custom::tc {

struct TcChainPlan {
  bool bf16 = false;
  int signature = kSigGeneric;  // kSigTanhAvg / kSigReluMax when the activations and pools are those
  TcChainParams params;  // the device pointers are set when the weights are uploaded
  // 16-bit elements (fp16 or bf16 bits): c1 [8][kC1Pitch], c3 [16][kC3Pitch], f5 [128][kTilePitch],
  // f6 [96][kF6Pitch], f7 [16][kF7Pitch]; biases fp32, padded with zeros.
  std::vector<uint16_t> c1, c3, f5, f6, f7;
  std::vector<float> c1_bias, c3_bias, f5_bias, f6_bias, f7_bias;
  std::vector<int> nodes;  // every node of the graph: one fusion group
  int input_value = -1, output_value = -1;
  std::string layers;  // "conv 5x5 1->6 + tanh + avgpool, ..., dense 84->10 + softmax"
};

// The plan, or why the graph is not of the family (one line naming the node and the limit).
std::variant<TcChainPlan, std::string> plan_tc_chain(const Graph& graph, bool bf16);

}  // namespace engine::custom::tc

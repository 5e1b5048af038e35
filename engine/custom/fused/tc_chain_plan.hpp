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

enum class TcOperands { FP16, BF16, INT8 };

struct TcChainPlan {
  bool bf16 = false;
  bool int8 = false;  // then qparams and the q_* weights, not params' pointers and the 16-bit ones
  TcInt8Params qparams;
  std::vector<int8_t> q_c1, q_c3, q_f5, q_f6, q_f7;          // tc_chain_params.hpp's int8 layouts
  std::vector<float> c1_scale, c3_scale, f5_scale, f6_scale, f7_scale;  // per channel: s_in * s_o
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

// Why a graph gets no plan: it is not of the family (one line naming the node and the limit), or
// (int8) its calibration lacks what the quantization needs.
struct TcRefusal {
  std::string why;
  bool calibration = false;  // the model is of the family; its calibration is missing or incomplete
};

// The plan, or the refusal; int8 needs the model's calibration (a range for each conv and dense input).
std::variant<TcChainPlan, TcRefusal> plan_tc_chain(const Graph& graph, TcOperands operands);

}  // namespace engine::custom::tc

#pragma once
// Plan time of tc_gemm_forward (tc_gemm.hpp): a conv2d's or dense layer's weights converted once to
// the kernel's operand layout, and int8's scales.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/tc_gemm.hpp"

namespace engine::custom {

struct TcGemmWeights {
  std::vector<unsigned char> operands;  // [oc_padded][k_padded] operands (2 or 1 bytes each), zeros as padding
  std::vector<float> bias;              // [oc_padded]
  std::vector<float> scale;             // int8: [oc_padded] s_in * s_o; empty otherwise
  int k_padded = 0, oc_padded = 0;
};

// `node`'s weight as the model stores it ([OC][C][kh][kw] or [units][in]: k in (c, ky, kx) order) for
// `out_channels` x `k` operands. fp16: a parameter beyond the format's range (|x| > 65504) is refused
// (std::invalid_argument naming the node). int8: weights quantized per output channel as the
// reference emulation does (s_o = max |w_o| / 127, q = clamp(rne(w / s_o), -127, 127)), `in_scale` =
// the input's s_in.
TcGemmWeights tc_gemm_weights(const formats::Node& node, int out_channels, int k, TcGemmOperands operands,
                              float in_scale);

// int8: the calibrated scale (range / 127) of value `value`, read by `reader`: the range of its own
// name, else of the value it aliases (a flatten's source), as the reference's emulation finds it.
// std::invalid_argument when the model has no calibration (the reference's message) or no range for it.
// int8: std::invalid_argument with the reference's message when the model has no calibration.
// The fp16 (or bf16) bits of v, rounded to nearest even, and that value back as a float.
uint16_t tc_bits16(float v, bool bf16);
float tc_round16(float v, bool bf16);

void require_calibration(const formats::Model& model);
float calibrated_input_scale(const Graph& graph, int value, const formats::Node& reader);

}  // namespace engine::custom

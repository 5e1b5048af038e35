// Plan time of tc_gemm_forward: weights to operands, int8 scales (tc_gemm_weights.hpp).
#include "engine/custom/tc_gemm_weights.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace engine::custom {

TcGemmWeights tc_gemm_weights(const formats::Node& node, int out_channels, int k, TcGemmOperands operands,
                              float in_scale) {
  if (!node.weight || node.weight->values.size() != size_t(out_channels) * size_t(k))
    throw std::logic_error(fmt::format("custom: node '{}': expected {} x {} weights", node.name, out_channels, k));
  const std::vector<float>& w = node.weight->values;
  TcGemmWeights out;
  const int stage = tc_gemm_stage_k(operands), bytes = tc_gemm_operand_bytes(operands);
  out.k_padded = (k + stage - 1) / stage * stage;
  out.oc_padded = (out_channels + kTcGemmWideCols - 1) / kTcGemmWideCols * kTcGemmWideCols;
  out.operands.assign(size_t(out.oc_padded) * size_t(out.k_padded) * size_t(bytes), 0);  // 0 is +0 in every type
  out.bias.assign(size_t(out.oc_padded), 0.0f);
  for (int o = 0; o < out_channels; ++o) {
    const float b = node.bias ? node.bias->values.at(size_t(o)) : 0.0f;
    if (!std::isfinite(b))
      throw std::invalid_argument(fmt::format("node '{}' ({}): a bias is not finite", node.name, formats::op_name(node.op)));
    out.bias[size_t(o)] = b;
  }
  unsigned char* dst = out.operands.data();
  for (const float v : w)
    if (!std::isfinite(v) || (operands == TcGemmOperands::FP16 && std::fabs(v) > 65504.0f))
      throw std::invalid_argument(fmt::format("node '{}' ({}): a weight ({}) is {}", node.name, formats::op_name(node.op),
                                              v, std::isfinite(v) ? "outside the fp16 range (|x| <= 65504)" : "not finite"));
  if (operands == TcGemmOperands::INT8) {
    out.scale.assign(size_t(out.oc_padded), 0.0f);
    for (int o = 0; o < out_channels; ++o) {
      const float* row = w.data() + size_t(o) * size_t(k);
      float hi = 0;
      for (int i = 0; i < k; ++i) hi = std::fmax(hi, std::fabs(row[i]));
      const float s = hi / 127.0f;  // as reference::quantize_per_channel
      for (int i = 0; i < k; ++i) {
        const float q = s == 0.0f ? 0.0f : std::fmax(-127.0f, std::fmin(127.0f, std::nearbyint(row[i] / s)));
        dst[size_t(o) * size_t(out.k_padded) + size_t(i)] = static_cast<unsigned char>(static_cast<int8_t>(q));
      }
      out.scale[size_t(o)] = in_scale * s;
    }
    return out;
  }
  for (int o = 0; o < out_channels; ++o)
    for (int i = 0; i < k; ++i) {
      const float v = w[size_t(o) * size_t(k) + size_t(i)];
      const uint16_t b16 = tc_bits16(v, operands == TcGemmOperands::BF16);
      std::memcpy(dst + (size_t(o) * size_t(out.k_padded) + size_t(i)) * 2, &b16, 2);
    }
  return out;
}

uint16_t tc_bits16(float v, bool bf16) {
  uint16_t b;
  if (bf16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    std::memcpy(&b, &h, 2);
  } else {
    const __half h = __float2half_rn(v);
    std::memcpy(&b, &h, 2);
  }
  return b;
}

float tc_round16(float v, bool bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : __half2float(__float2half_rn(v));
}

void require_calibration(const formats::Model& model) {
  if (!model.calibration)
    throw std::invalid_argument(fmt::format("model '{}' has no calibration data, which int8 needs: run engine calibrate "
                                            "MODEL DATA -o OUT.json first",
                                            model.name));
}

float calibrated_input_scale(const Graph& graph, int value, const formats::Node& reader) {
  const formats::Model& model = *graph.model;
  require_calibration(model);
  for (int v = value; v >= 0; v = graph.value(v).alias_of)
    for (const auto& [name, r] : model.calibration->ranges)
      if (name == graph.value(v).name) return float(r) / 127.0f;  // 0 for a value calibrated as all zeros
  throw std::invalid_argument(fmt::format("model '{}': its calibration has no range for '{}', the input of node '{}' ({}): "
                                          "calibrate the model again (engine calibrate)",
                                          model.name, graph.value(value).name, reader.name,
                                          formats::op_name(reader.op)));
}

}  // namespace engine::custom

#include "engine/custom/fused/tc_chain_plan.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>

namespace engine::custom::tc {
namespace {

using formats::OpType;

struct NotOfFamily {
  std::string why;
};

uint16_t bits16(float v, bool bf16) {
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

std::optional<TcAct> act_of(OpType op) {
  switch (op) {
    case OpType::Relu: return TcAct::Relu;
    case OpType::Tanh: return TcAct::Tanh;
    case OpType::Sigmoid: return TcAct::Sigmoid;
    default: return std::nullopt;
  }
}

const char* act_text(int a) {
  switch (TcAct(a)) {
    case TcAct::Relu: return " + relu";
    case TcAct::Tanh: return " + tanh";
    case TcAct::Sigmoid: return " + sigmoid";
    case TcAct::None: break;
  }
  return "";
}

std::string node_text(const formats::Node& n) { return fmt::format("node '{}' ({})", n.name, formats::op_name(n.op)); }

// The graph's nodes in order, each reading only the previous one's output (the fused planner's rule).
std::vector<const PlannedNode*> chain_of(const Graph& g) {
  if (g.outputs.size() != 1) throw NotOfFamily{fmt::format("the graph has {} outputs, not one", g.outputs.size())};
  std::vector<const PlannedNode*> chain;
  int previous = g.input;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const PlannedNode& pn = g.nodes[i];
    if (pn.inputs.size() != 1 || pn.inputs[0] != previous)
      throw NotOfFamily{node_text(*pn.node) + " does not read only the previous node's output: not a chain"};
    const Value& prev = g.value(previous);
    if (prev.consumers.size() != 1 || (prev.is_output && i > 0))
      throw NotOfFamily{fmt::format("value '{}' has several readers or is an output: not a chain", prev.name)};
    chain.push_back(&pn);
    previous = pn.output;
  }
  if (chain.empty() || previous != g.outputs[0]) throw NotOfFamily{"the last node's output is not the graph output"};
  return chain;
}

// A walk over the chain that expects the family's layers in order.
class Matcher {
 public:
  explicit Matcher(std::vector<const PlannedNode*> chain) : chain_(std::move(chain)) {}

  const formats::Node& expect(OpType op, const char* role) {
    if (at_ == chain_.size())
      throw NotOfFamily{fmt::format("the graph ends where the family has {} ({})", role, formats::op_name(op))};
    const formats::Node& n = *chain_[at_]->node;
    if (n.op != op) throw NotOfFamily{fmt::format("{} where the family has {} ({})", node_text(n), role, formats::op_name(op))};
    ++at_;
    return n;
  }
  const formats::Node& expect_pool(const char* role, int& pool_max) {
    if (at_ < chain_.size() && chain_[at_]->node->op == OpType::MaxPool) {
      pool_max = 1;
      return expect(OpType::MaxPool, role);
    }
    pool_max = 0;
    return expect(OpType::AvgPool, role);
  }
  int optional_act() {  // one activation, or none
    if (at_ == chain_.size()) return int(TcAct::None);
    const auto a = act_of(chain_[at_]->node->op);
    if (!a) return int(TcAct::None);
    ++at_;
    if (at_ < chain_.size() && act_of(chain_[at_]->node->op))
      throw NotOfFamily{node_text(*chain_[at_]->node) + ": two activations in a row (the family applies one)"};
    return int(*a);
  }
  bool optional(OpType op) {
    if (at_ < chain_.size() && chain_[at_]->node->op == op) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect_end() {
    if (at_ != chain_.size())
      throw NotOfFamily{node_text(*chain_[at_]->node) + " follows the family's last layer (dense [+ act] [+ softmax])"};
  }

 private:
  std::vector<const PlannedNode*> chain_;
  size_t at_ = 0;
};

void check_window(const formats::Node& n, int k, int s) {
  const formats::Window2D& w = n.window;
  if (w.kernel_h != k || w.kernel_w != k || w.stride_h != s || w.stride_w != s || w.pad_top || w.pad_bottom ||
      w.pad_left || w.pad_right)
    throw NotOfFamily{fmt::format("{}: window {}x{} stride {}x{} padding [{},{},{},{}]; the family has {}x{} stride "
                                  "{} without padding",
                                  node_text(n), w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top,
                                  w.pad_bottom, w.pad_left, w.pad_right, k, k, s)};
}

float checked(float v, bool bf16, const formats::Node& n) {
  if (!std::isfinite(v) || (!bf16 && std::fabs(v) > 65504.0f))
    throw NotOfFamily{fmt::format("{}: a parameter ({}) is outside the fp16 range (|x| <= 65504)", node_text(n), v)};
  return v;
}

// Every dense layer: weights [units][in] into [padded units][pitch], bias into [padded units].
void pack_dense(const formats::Node& n, int in, int max_in, int max_units, int pitch, bool bf16,
                std::vector<uint16_t>& w, std::vector<float>& b) {
  if (n.units > max_units)
    throw NotOfFamily{fmt::format("{}: {} units; the family's layer has at most {}", node_text(n), n.units, max_units)};
  if (in > max_in)
    throw NotOfFamily{fmt::format("{}: {} inputs; the family's layer has at most {}", node_text(n), in, max_in)};
  w.assign(size_t(max_units) * size_t(pitch), bits16(0.0f, bf16));
  b.assign(size_t(max_units), 0.0f);
  const std::vector<float>& src = n.weight->values;
  for (int u = 0; u < n.units; ++u) {
    for (int k = 0; k < in; ++k) w[size_t(u) * pitch + k] = bits16(checked(src[size_t(u) * in + k], bf16, n), bf16);
    if (n.bias) b[size_t(u)] = checked(n.bias->values[size_t(u)], bf16, n);
  }
}

}  // namespace

std::variant<TcChainPlan, std::string> plan_tc_chain(const Graph& g, bool bf16) {
  try {
    TcChainPlan plan;
    plan.bf16 = bf16;
    TcChainParams& P = plan.params;
    Matcher m(chain_of(g));
    const Value& input = g.value(g.input);
    if (input.shape != formats::Shape{1, kIn, kIn})
      throw NotOfFamily{fmt::format("the input is {}; the family's is [1, 32, 32] (e.g. 28x28 padded by 2)",
                                    formats::shape_to_string(input.shape))};
    // c1
    const formats::Node& c1 = m.expect(OpType::Conv2D, "a 5x5 convolution");
    check_window(c1, 5, 1);
    const int C1 = c1.out_channels;
    if (C1 > kC1Out)
      throw NotOfFamily{fmt::format("{}: {} output channels; the family's first convolution has at most {}",
                                    node_text(c1), C1, kC1Out)};
    P.act[0] = m.optional_act();
    const formats::Node& p1 = m.expect_pool("a 2x2 pool", P.pool_max[0]);
    check_window(p1, 2, 2);
    // c3
    const formats::Node& c3 = m.expect(OpType::Conv2D, "a 5x5 convolution");
    check_window(c3, 5, 1);
    const int C3 = c3.out_channels;
    if (C3 > kC3Out)
      throw NotOfFamily{fmt::format("{}: {} output channels; the family's second convolution has at most {}",
                                    node_text(c3), C3, kC3Out)};
    P.act[1] = m.optional_act();
    const formats::Node& p3 = m.expect_pool("a 2x2 pool", P.pool_max[1]);
    check_window(p3, 2, 2);
    m.expect(OpType::Flatten, "flatten");
    // The dense layers
    const formats::Node& f5 = m.expect(OpType::Dense, "a dense layer");
    P.act[2] = m.optional_act();
    const formats::Node& f6 = m.expect(OpType::Dense, "a dense layer");
    P.act[3] = m.optional_act();
    const formats::Node& f7 = m.expect(OpType::Dense, "a dense layer");
    P.act[4] = m.optional_act();
    P.softmax = m.optional(OpType::Softmax) ? 1 : 0;
    m.expect_end();
    P.units = f7.units;
    auto all = [&](TcAct a, int pool_max) {
      return P.act[0] == int(a) && P.act[1] == int(a) && P.act[2] == int(a) && P.act[3] == int(a) &&
             P.act[4] == int(TcAct::None) && P.pool_max[0] == pool_max && P.pool_max[1] == pool_max;
    };
    plan.signature = all(TcAct::Tanh, 0) ? kSigTanhAvg : all(TcAct::Relu, 1) ? kSigReluMax : kSigGeneric;

    // c1: [8][kC1Pitch], tap = ky * 5 + kx (one input channel).
    plan.c1.assign(size_t(kC1Out) * kC1Pitch, bits16(0.0f, bf16));
    plan.c1_bias.assign(kC1Out, 0.0f);
    for (int o = 0; o < C1; ++o) {
      for (int tap = 0; tap < 25; ++tap)
        plan.c1[size_t(o) * kC1Pitch + tap] = bits16(checked(c1.weight->values[size_t(o) * 25 + tap], bf16, c1), bf16);
      if (c1.bias) plan.c1_bias[size_t(o)] = checked(c1.bias->values[size_t(o)], bf16, c1);
    }
    // c3: [16][kC3Pitch], k = tap * 8 + input channel (channels-last, as its input is stored).
    plan.c3.assign(size_t(kC3Out) * kC3Pitch, bits16(0.0f, bf16));
    plan.c3_bias.assign(kC3Out, 0.0f);
    for (int o = 0; o < C3; ++o) {
      for (int c = 0; c < C1; ++c)
        for (int tap = 0; tap < 25; ++tap)
          plan.c3[size_t(o) * kC3Pitch + tap * kC3Ch + c] =
              bits16(checked(c3.weight->values[(size_t(o) * C1 + c) * 25 + tap], bf16, c3), bf16);
      if (c3.bias) plan.c3_bias[size_t(o)] = checked(c3.bias->values[size_t(o)], bf16, c3);
    }
    // The dense layers: f5 reads c3's pooled output flattened CHW (channel * 25 + window), which
    // is where the kernel's tile keeps it.
    pack_dense(f5, C3 * 25, kF5K, kF5N, kTilePitch, bf16, plan.f5, plan.f5_bias);
    pack_dense(f6, f5.units, kF6K, kF6N, kF6Pitch, bf16, plan.f6, plan.f6_bias);
    pack_dense(f7, f6.units, kF7K, kF7N, kF7Pitch, bf16, plan.f7, plan.f7_bias);

    for (size_t i = 0; i < g.nodes.size(); ++i) plan.nodes.push_back(int(i));
    plan.input_value = g.input;
    plan.output_value = g.outputs[0];
    auto pool = [](int max) { return max ? "maxpool" : "avgpool"; };
    plan.layers = fmt::format(
        "conv 5x5 1->{}{} + {}, conv 5x5 {}->{}{} + {}, dense {}->{}{}, {}->{}{}, {}->{}{}{}", C1,
        act_text(P.act[0]), pool(P.pool_max[0]), C1, C3, act_text(P.act[1]), pool(P.pool_max[1]), C3 * 25, f5.units,
        act_text(P.act[2]), f5.units, f6.units, act_text(P.act[3]), f6.units, f7.units, act_text(P.act[4]),
        P.softmax ? " + softmax" : "");
    return plan;
  } catch (const NotOfFamily& e) {
    return e.why;
  }
}

}  // namespace engine::custom::tc

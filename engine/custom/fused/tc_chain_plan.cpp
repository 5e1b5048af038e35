#include "engine/custom/fused/tc_chain_plan.hpp"
#include "engine/custom/tc_gemm_weights.hpp"

#include <fmt/format.h>

#include <cmath>
#include <array>
#include <optional>

namespace engine::custom::tc {
namespace {

using formats::OpType;

struct NotOfFamily {
  std::string why;
  bool calibration = false;
};

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
    last_ = chain_[at_];
    ++at_;
    return n;
  }
  // The value the node matched last reads.
  int last_input() const { return last_->inputs.at(0); }
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
  const PlannedNode* last_ = nullptr;
  size_t at_ = 0;
};

// The window k x k, stride s, padded by `pad` on every side (`pad_text` names where padding is allowed).
void check_window(const formats::Node& n, int k, int s, int pad = 0,
                  const char* pad_text = "without padding") {
  const formats::Window2D& w = n.window;
  if (w.kernel_h != k || w.kernel_w != k || w.stride_h != s || w.stride_w != s || w.pad_top != pad ||
      w.pad_bottom != pad || w.pad_left != pad || w.pad_right != pad)
    throw NotOfFamily{fmt::format("{}: window {}x{} stride {}x{} padding [{},{},{},{}]; the family has {}x{} stride "
                                  "{} {}",
                                  node_text(n), w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top,
                                  w.pad_bottom, w.pad_left, w.pad_right, k, k, s, pad_text)};
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
  w.assign(size_t(max_units) * size_t(pitch), tc_bits16(0.0f, bf16));
  b.assign(size_t(max_units), 0.0f);
  const std::vector<float>& src = n.weight->values;
  for (int u = 0; u < n.units; ++u) {
    for (int k = 0; k < in; ++k) w[size_t(u) * pitch + k] = tc_bits16(checked(src[size_t(u) * in + k], bf16, n), bf16);
    if (n.bias) b[size_t(u)] = checked(n.bias->values[size_t(u)], bf16, n);
  }
}

// int8: the calibrated range of a value as the reference's emulation finds it (its own name, else
// the value it aliases: a flatten's source), as the scale s = range / 127.
float input_scale(const Graph& g, int value, const formats::Node& reader) {
  const formats::Model& model = *g.model;
  for (int v = value; v >= 0; v = g.value(v).alias_of)
    for (const auto& [name, r] : model.calibration->ranges)
      if (name == g.value(v).name) return float(r) / 127.0f;
  throw NotOfFamily{fmt::format("model '{}': its calibration has no range for '{}', the input of {}: calibrate the "
                                "model again (engine calibrate)",
                                model.name, g.value(value).name, node_text(reader)),
                    true};
}

// Weights [rows][per_row] quantized per row as the reference's quantize_per_channel (s = max |w| /
// 127, q = clamp(rne(w / s), -127, 127), 0 where s is 0): q into dst[row * pitch + place(i)], s out.
template <class Place>
std::vector<float> quantize_rows(const std::vector<float>& w, int rows, int per_row, int8_t* dst, int pitch,
                                 Place place) {
  std::vector<float> scales(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    float hi = 0;
    for (int i = 0; i < per_row; ++i) hi = std::fmax(hi, std::fabs(w[size_t(r) * per_row + i]));
    const float s = hi / 127.0f;
    scales[size_t(r)] = s;
    for (int i = 0; i < per_row; ++i) {
      const float q = s == 0.0f ? 0.0f : std::fmax(-127.0f, std::fmin(127.0f, std::nearbyint(w[size_t(r) * per_row + i] / s)));
      dst[size_t(r) * pitch + size_t(place(i))] = int8_t(q);
    }
  }
  return scales;
}

void check_finite(const formats::Node& n) {
  for (const auto* t : {&n.weight, &n.bias})
    if (*t)
      for (float v : (*t)->values)
        if (!std::isfinite(v)) throw NotOfFamily{fmt::format("{}: a parameter is not finite", node_text(n))};
}

// The int8 plan: per-tensor input scales from the calibration, weights quantized per output channel
// into the byte layouts of tc_chain_params.hpp, each channel's sum scale s_in * s_o.
void plan_int8(const Graph& g, const int (&reads)[5], std::array<const formats::Node*, 5> nodes, TcChainPlan& plan) {
  const formats::Node &c1 = *nodes[0], &c3 = *nodes[1], &f5 = *nodes[2], &f6 = *nodes[3], &f7 = *nodes[4];
  TcInt8Params& Q = plan.qparams;
  for (int l = 0; l < 5; ++l) {
    check_finite(*nodes[size_t(l)]);
    Q.in_scale[l] = input_scale(g, reads[l], *nodes[size_t(l)]);
    Q.in_inv[l] = Q.in_scale[l] > 0.0f ? 1.0f / Q.in_scale[l] : 0.0f;
  }
  const int C1 = c1.out_channels, C3 = c3.out_channels;
  auto bias_of = [](const formats::Node& n, int rows, int padded) {
    std::vector<float> b(size_t(padded), 0.0f);
    if (n.bias)
      for (int r = 0; r < rows; ++r) b[size_t(r)] = n.bias->values[size_t(r)];
    return b;
  };
  auto sum_scales = [](std::vector<float> s_o, float s_in, int padded) {
    for (float& s : s_o) s *= s_in;
    s_o.resize(size_t(padded), 0.0f);
    return s_o;
  };
  // c1: [8][kQC1Pitch], tap = ky * 5 + kx.
  plan.q_c1.assign(size_t(kC1Out) * kQC1Pitch, 0);
  plan.c1_scale = sum_scales(quantize_rows(c1.weight->values, C1, 25, plan.q_c1.data(), kQC1Pitch, [](int i) { return i; }),
                             Q.in_scale[0], kC1Out);
  plan.c1_bias = bias_of(c1, C1, kC1Out);
  // c3: [16][kQC3Pitch], k = (ky * 6 + kx) * 8 + channel.
  plan.q_c3.assign(size_t(kC3Out) * kQC3Pitch, 0);
  plan.c3_scale = sum_scales(quantize_rows(c3.weight->values, C3, C1 * 25, plan.q_c3.data(), kQC3Pitch,
                                           [](int i) {
                                             const int c = i / 25, tap = i % 25;
                                             return ((tap / 5) * kQC3TapCols + tap % 5) * kC3Ch + c;
                                           }),
                             Q.in_scale[1], kC3Out);
  plan.c3_bias = bias_of(c3, C3, kC3Out);
  // The dense layers, [padded units][pitch], k as the model's.
  auto dense = [&](const formats::Node& n, int in, int max_in, int max_units, int pitch, float s_in,
                   std::vector<int8_t>& w, std::vector<float>& scale, std::vector<float>& b) {
    if (n.units > max_units)
      throw NotOfFamily{fmt::format("{}: {} units; the family's layer has at most {}", node_text(n), n.units, max_units)};
    if (in > max_in)
      throw NotOfFamily{fmt::format("{}: {} inputs; the family's layer has at most {}", node_text(n), in, max_in)};
    w.assign(size_t(max_units) * size_t(pitch), 0);
    scale = sum_scales(quantize_rows(n.weight->values, n.units, in, w.data(), pitch, [](int i) { return i; }), s_in,
                       max_units);
    b = bias_of(n, n.units, max_units);
  };
  dense(f5, C3 * 25, kF5K, kF5N, kQF5Pitch, Q.in_scale[2], plan.q_f5, plan.f5_scale, plan.f5_bias);
  dense(f6, f5.units, kF6K, kF6N, kQF6Pitch, Q.in_scale[3], plan.q_f6, plan.f6_scale, plan.f6_bias);
  dense(f7, f6.units, kF7K, kF7N, kQF7Pitch, Q.in_scale[4], plan.q_f7, plan.f7_scale, plan.f7_bias);
  for (int i = 0; i < 5; ++i) Q.act[i] = plan.params.act[i];
  Q.pool_max[0] = plan.params.pool_max[0];
  Q.pool_max[1] = plan.params.pool_max[1];
  Q.units = plan.params.units;
  Q.softmax = plan.params.softmax;
  Q.padded_input = plan.params.padded_input;
}

}  // namespace

std::variant<TcChainPlan, TcRefusal> plan_tc_chain(const Graph& g, TcOperands operands) {
  const bool bf16 = operands == TcOperands::BF16;
  try {
    TcChainPlan plan;
    plan.bf16 = bf16;
    plan.int8 = operands == TcOperands::INT8;
    TcChainParams& P = plan.params;
    int reads[5];  // the value each conv / dense reads
    Matcher m(chain_of(g));
    // The input: [1, 32, 32], or [1, 28, 28] that c1 pads by 2 (the same [32][32] as c1 reads it;
    // the kernel stages it with zeros around it).
    const Value& input = g.value(g.input);
    const bool padded = input.shape == formats::Shape{1, kInPadded, kInPadded};
    if (input.shape != formats::Shape{1, kIn, kIn} && !padded)
      throw NotOfFamily{fmt::format("the input is {}; the family's is [1, 32, 32], or [1, 28, 28] that the first "
                                    "convolution pads by 2",
                                    formats::shape_to_string(input.shape))};
    // c1
    const formats::Node& c1 = m.expect(OpType::Conv2D, "a 5x5 convolution");
    reads[0] = m.last_input();
    if (padded) check_window(c1, 5, 1, kInPad, "padded by 2 on each side on a [1, 28, 28] input");
    else check_window(c1, 5, 1);
    P.padded_input = padded ? 1 : 0;
    const int C1 = c1.out_channels;
    if (C1 > kC1Out)
      throw NotOfFamily{fmt::format("{}: {} output channels; the family's first convolution has at most {}",
                                    node_text(c1), C1, kC1Out)};
    P.act[0] = m.optional_act();
    const formats::Node& p1 = m.expect_pool("a 2x2 pool", P.pool_max[0]);
    check_window(p1, 2, 2);
    // c3
    const formats::Node& c3 = m.expect(OpType::Conv2D, "a 5x5 convolution");
    reads[1] = m.last_input();
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
    reads[2] = m.last_input();
    P.act[2] = m.optional_act();
    const formats::Node& f6 = m.expect(OpType::Dense, "a dense layer");
    reads[3] = m.last_input();
    P.act[3] = m.optional_act();
    const formats::Node& f7 = m.expect(OpType::Dense, "a dense layer");
    reads[4] = m.last_input();
    P.act[4] = m.optional_act();
    P.softmax = m.optional(OpType::Softmax) ? 1 : 0;
    m.expect_end();
    P.units = f7.units;
    auto all = [&](TcAct a, int pool_max) {
      return P.act[0] == int(a) && P.act[1] == int(a) && P.act[2] == int(a) && P.act[3] == int(a) &&
             P.act[4] == int(TcAct::None) && P.pool_max[0] == pool_max && P.pool_max[1] == pool_max;
    };
    plan.signature = all(TcAct::Tanh, 0) ? kSigTanhAvg : all(TcAct::Relu, 1) ? kSigReluMax : kSigGeneric;

    if (plan.int8) {
      if (!g.model->calibration)
        throw NotOfFamily{fmt::format("model '{}' has no calibration data, which int8 needs: run engine calibrate "
                                      "MODEL DATA -o OUT.json first",
                                      g.model->name),
                          true};
      plan_int8(g, reads, {&c1, &c3, &f5, &f6, &f7}, plan);
    } else {
    // c1: [8][kC1Pitch], tap = ky * 5 + kx (one input channel).
    plan.c1.assign(size_t(kC1Out) * kC1Pitch, tc_bits16(0.0f, bf16));
    plan.c1_bias.assign(kC1Out, 0.0f);
    for (int o = 0; o < C1; ++o) {
      for (int tap = 0; tap < 25; ++tap)
        plan.c1[size_t(o) * kC1Pitch + tap] = tc_bits16(checked(c1.weight->values[size_t(o) * 25 + tap], bf16, c1), bf16);
      if (c1.bias) plan.c1_bias[size_t(o)] = checked(c1.bias->values[size_t(o)], bf16, c1);
    }
    // c3: [16][kC3Pitch], k = tap * 8 + input channel (channels-last, as its input is stored).
    plan.c3.assign(size_t(kC3Out) * kC3Pitch, tc_bits16(0.0f, bf16));
    plan.c3_bias.assign(kC3Out, 0.0f);
    for (int o = 0; o < C3; ++o) {
      for (int c = 0; c < C1; ++c)
        for (int tap = 0; tap < 25; ++tap)
          plan.c3[size_t(o) * kC3Pitch + tap * kC3Ch + c] =
              tc_bits16(checked(c3.weight->values[(size_t(o) * C1 + c) * 25 + tap], bf16, c3), bf16);
      if (c3.bias) plan.c3_bias[size_t(o)] = checked(c3.bias->values[size_t(o)], bf16, c3);
    }
    // The dense layers: f5 reads c3's pooled output flattened CHW (channel * 25 + window), which
    // is where the kernel's tile keeps it.
    pack_dense(f5, C3 * 25, kF5K, kF5N, kTilePitch, bf16, plan.f5, plan.f5_bias);
    pack_dense(f6, f5.units, kF6K, kF6N, kF6Pitch, bf16, plan.f6, plan.f6_bias);
    pack_dense(f7, f6.units, kF7K, kF7N, kF7Pitch, bf16, plan.f7, plan.f7_bias);
    }

    for (size_t i = 0; i < g.nodes.size(); ++i) plan.nodes.push_back(int(i));
    plan.input_value = g.input;
    plan.output_value = g.outputs[0];
    auto pool = [](int max) { return max ? "maxpool" : "avgpool"; };
    plan.layers = fmt::format(
        "{}conv 5x5 1->{}{} + {}, conv 5x5 {}->{}{} + {}, dense {}->{}{}, {}->{}{}, {}->{}{}{}",
        P.padded_input ? "input 28x28 zero-padded by 2 to 32x32 while staged, " : "", C1,
        act_text(P.act[0]), pool(P.pool_max[0]), C1, C3, act_text(P.act[1]), pool(P.pool_max[1]), C3 * 25, f5.units,
        act_text(P.act[2]), f5.units, f6.units, act_text(P.act[3]), f6.units, f7.units, act_text(P.act[4]),
        P.softmax ? " + softmax" : "");
    return plan;
  } catch (const NotOfFamily& e) {
    return TcRefusal{e.why, e.calibration};
  }
}

}  // namespace engine::custom::tc

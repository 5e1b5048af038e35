#include "engine/custom/tc_general/tc_general_plan.hpp"

#include <fmt/format.h>

#include <numeric>

#include "engine/custom/node_shapes.hpp"
#include "engine/custom/tc_gemm_weights.hpp"

namespace engine::custom::tcg {
namespace {

int round_up(int v, int m) { return (v + m - 1) / m * m; }

std::string refuse(const formats::Node& node, const std::string& why) {
  return fmt::format("node '{}' ({}): {}", node.name, formats::op_name(node.op), why);
}

// How the chain's current value is stored.
enum class Store { Input, Pixels, Rows };  // fp32 input (NCHW) | 16-bit NHWC | 16-bit rows

// The window and sizes of a conv2d or pool from its [C, H, W] input and output; pitch: the input's
// channels as stored.
TcConvGeometry geometry(const formats::Node& node, const Value& in, const Value& out, int pitch) {
  TcConvGeometry g;
  g.kh = node.window.kernel_h, g.kw = node.window.kernel_w;
  g.sh = node.window.stride_h, g.sw = node.window.stride_w;
  g.pt = node.window.pad_top, g.pl = node.window.pad_left;
  g.h = int(in.shape.at(1)), g.w = int(in.shape.at(2));
  g.oh = int(out.shape.at(1)), g.ow = int(out.shape.at(2));
  g.pitch = pitch;
  return g;
}

// Biases rounded to the format (the emulation rounds them too), zeros in the padding.
std::vector<float> packed_bias(const formats::Node& node, int units, int rows_padded, bool bf16) {
  std::vector<float> bias(size_t(rows_padded), 0.0f);
  if (node.bias)
    for (int o = 0; o < units && o < int(node.bias->values.size()); ++o)
      bias[size_t(o)] = tc_round16(node.bias->values[size_t(o)], bf16);
  return bias;
}

}  // namespace

std::variant<TcgPlan, std::string> plan_tc_general(const Graph& graph, bool bf16, bool convolutions) {
  TcgPlan plan;
  plan.bf16 = bf16;
  plan.input_value = graph.input;
  if (graph.outputs.size() != 1) return fmt::format("{} graph outputs (this path writes one)", graph.outputs.size());
  int cur = graph.input;
  Store store = Store::Input;
  bool flattened = false;
  int channels = 0, height = 0, width = 0, pitch = 0;  // Pixels: the stored image
  for (int i = 0; i < int(graph.nodes.size()); ++i) {
    const PlannedNode& pn = graph.nodes[size_t(i)];
    const formats::Node& node = *pn.node;
    if (pn.inputs.size() != 1 || pn.inputs[0] != cur)
      return refuse(node, "the path takes one chain of nodes, each reading the previous one's output");
    const Value& in = graph.value(cur);
    const Value& out = graph.value(pn.output);
    if (cur != graph.input && (in.is_output || in.consumers.size() != 1))
      return refuse(node, fmt::format("its input '{}' has other readers or is a graph output", in.name));
    if (plan.softmax_node >= 0) return refuse(node, "follows the softmax (the softmax ends the chain)");
    const bool after_gemm = !plan.layers.empty() && plan.layers.back().node == in.producer &&
                            plan.layers.back().kind != TcgKind::MaxPool;
    const bool spatial = in.shape.size() == 3 && out.shape.size() == 3;
    if (node.op == OpType::Flatten) {
      if (store == Store::Rows) return refuse(node, "a flatten after a dense layer");
      flattened = true;
    } else if (node.op == OpType::Conv2D || node.op == OpType::MaxPool) {
      if (!convolutions) return refuse(node, "convolutions are off (TcGeneralOptions::convolutions)");
      if (store == Store::Rows || flattened || !spatial) return refuse(node, "not on an image of the chain's input");
      if (store == Store::Input && node.op == OpType::MaxPool) return refuse(node, "a pool of the input");
      TcgLayer l;
      l.node = i;
      l.first = store == Store::Input;
      l.rows_per_image = int(out.shape[1] * out.shape[2]);
      const int in_channels = int(in.shape[0]);
      l.conv = geometry(node, in, out, l.first ? in_channels : pitch);
      l.units = int(out.shape[0]);
      l.ldy = round_up(l.units, 8);
      if (node.op == OpType::MaxPool) {
        l.kind = TcgKind::MaxPool;
        l.ldy = pitch;
        l.context = fmt::format("node '{}' (maxpool", node.name);
      } else {
        const int taps = l.conv.kh * l.conv.kw;
        if (!node.weight || int64_t(node.weight->values.size()) != int64_t(l.units) * in_channels * taps)
          return refuse(node, "its weight does not hold out x in channels x taps values");
        l.kind = TcgKind::Conv;
        // fp32 input: k = (channel, tap), the model's order; 16-bit pixels: k = (tap, padded channel).
        l.in_features = l.first ? in_channels * taps : taps * pitch;
        l.k_padded = round_up(l.in_features, kTcgBk);
        l.rows_padded = round_up(l.units, kTcgRowAlign);
        l.weight.assign(size_t(l.rows_padded) * size_t(l.k_padded), tc_bits16(0.0f, bf16));
        for (int o = 0; o < l.units; ++o)
          for (int c = 0; c < in_channels; ++c)
            for (int t = 0; t < taps; ++t) {
              const int k = l.first ? c * taps + t : t * pitch + c;
              const size_t from = (size_t(o) * size_t(in_channels) + size_t(c)) * size_t(taps) + size_t(t);
              l.weight[size_t(o) * size_t(l.k_padded) + size_t(k)] = tc_bits16(node.weight->values[from], bf16);
            }
        l.bias = packed_bias(node, l.units, l.rows_padded, bf16);
        l.context = fmt::format("node '{}' (conv2d", node.name);
      }
      l.out_per_image = (long long)l.rows_per_image * l.ldy;
      store = Store::Pixels;
      channels = l.units, height = l.conv.oh, width = l.conv.ow, pitch = l.ldy;
      plan.layers.push_back(std::move(l));
    } else if (node.op == OpType::Dense) {
      if (!node.weight || int64_t(node.weight->values.size()) != in.elements * out.elements)
        return refuse(node, "its weight does not hold inputs x units values");
      if (store == Store::Pixels && in.elements != int64_t(channels) * height * width)
        return refuse(node, "its inputs are not the previous layer's pixels");
      TcgLayer l;
      l.node = i;
      l.in_features = int(in.elements);
      l.units = int(out.elements);
      l.first = store == Store::Input;
      l.ldx = l.first ? l.in_features : store == Store::Pixels ? height * width * pitch : plan.layers.back().ldy;
      l.ldy = round_up(l.units, 8);
      l.k_padded = round_up(l.ldx, kTcgBk);
      l.rows_padded = round_up(l.units, kTcgRowAlign);
      l.weight.assign(size_t(l.rows_padded) * size_t(l.k_padded), tc_bits16(0.0f, bf16));
      // After NHWC pixels the model's feature c * H * W + p (its NCHW flatten) is stored at p * pitch + c.
      const int plane = height * width;
      for (int o = 0; o < l.units; ++o)
        for (int k = 0; k < l.in_features; ++k) {
          const int at = store == Store::Pixels ? (k % plane) * pitch + k / plane : k;
          l.weight[size_t(o) * size_t(l.k_padded) + size_t(at)] =
              tc_bits16(node.weight->values[size_t(o) * size_t(l.in_features) + size_t(k)], bf16);
        }
      l.bias = packed_bias(node, l.units, l.rows_padded, bf16);
      l.out_per_image = l.ldy;
      l.context = fmt::format("node '{}' (dense", node.name);
      store = Store::Rows;
      plan.layers.push_back(std::move(l));
    } else if (const auto act = activation_of(node.op)) {
      if (!after_gemm || plan.layers.back().act != Activation::None)
        return refuse(node, "an activation not directly after a dense or conv2d layer");
      plan.layers.back().act = *act;
      plan.layers.back().context += fmt::format(" + {} '{}'", formats::op_name(node.op), node.name);
    } else if (node.op == OpType::Softmax) {
      if (store != Store::Rows) return refuse(node, "a softmax not after a dense layer");
      plan.softmax_node = i;
    } else {
      return refuse(node, convolutions ? "the tensor-core general path takes chains of conv2d, maxpool and dense "
                                         "layers so far"
                                       : "the tensor-core general path takes chains of dense layers (convolutions "
                                         "off)");
    }
    cur = pn.output;
  }
  if (plan.layers.empty()) return std::string("no dense layer");
  if (plan.layers.back().kind != TcgKind::Dense) return std::string("the chain does not end with a dense layer");
  if (graph.outputs[0] != cur) return fmt::format("the graph output '{}' is not the chain's end", graph.value(graph.outputs[0]).name);
  plan.output_value = cur;
  TcgLayer& last = plan.layers.back();
  last.last = true;
  last.ldy = last.units;
  last.out_per_image = 0;
  for (TcgLayer& l : plan.layers) l.context += ")";
  plan.nodes.resize(graph.nodes.size());
  std::iota(plan.nodes.begin(), plan.nodes.end(), 0);
  return plan;
}

}  // namespace engine::custom::tcg

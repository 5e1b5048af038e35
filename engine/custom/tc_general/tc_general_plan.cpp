#include "engine/custom/tc_general/tc_general_plan.hpp"

#include <fmt/format.h>

#include <numeric>

#include "engine/custom/node_shapes.hpp"
#include "engine/custom/tc_gemm_weights.hpp"
#include "engine/custom/tc_general/tc_dense_gemm.hpp"

namespace engine::custom::tcg {
namespace {

int round_up(int v, int m) { return (v + m - 1) / m * m; }

std::string refuse(const formats::Node& node, const std::string& why) {
  return fmt::format("node '{}' ({}): {}", node.name, formats::op_name(node.op), why);
}

}  // namespace

std::variant<TcgPlan, std::string> plan_tc_general(const Graph& graph, bool bf16) {
  TcgPlan plan;
  plan.bf16 = bf16;
  plan.input_value = graph.input;
  if (graph.outputs.size() != 1) return fmt::format("{} graph outputs (this path writes one)", graph.outputs.size());
  int cur = graph.input;
  for (int i = 0; i < int(graph.nodes.size()); ++i) {
    const PlannedNode& pn = graph.nodes[size_t(i)];
    const formats::Node& node = *pn.node;
    if (pn.inputs.size() != 1 || pn.inputs[0] != cur)
      return refuse(node, "the path takes one chain of nodes, each reading the previous one's output");
    const Value& in = graph.value(cur);
    if (cur != graph.input && (in.is_output || in.consumers.size() != 1))
      return refuse(node, fmt::format("its input '{}' has other readers or is a graph output", in.name));
    if (plan.softmax_node >= 0) return refuse(node, "follows the softmax (the softmax ends the chain)");
    const bool after_dense = !plan.layers.empty() && plan.layers.back().node == graph.value(cur).producer;
    if (node.op == OpType::Flatten) {
      if (!plan.layers.empty()) return refuse(node, "a flatten after a dense layer");
    } else if (node.op == OpType::Dense) {
      const Value& out = graph.value(pn.output);
      if (!node.weight || int64_t(node.weight->values.size()) != in.elements * out.elements)
        return refuse(node, "its weight does not hold inputs x units values");
      TcgLayer l;
      l.node = i;
      l.in_features = int(in.elements);
      l.units = int(out.elements);
      l.first = plan.layers.empty();
      l.ldx = l.first ? l.in_features : plan.layers.back().ldy;
      l.ldy = round_up(l.units, 8);
      l.k_padded = round_up(l.ldx, kTcgBk);
      l.rows_padded = round_up(l.units, kTcgRowAlign);
      l.weight.assign(size_t(l.rows_padded) * size_t(l.k_padded), tc_bits16(0.0f, bf16));
      for (int o = 0; o < l.units; ++o)
        for (int k = 0; k < l.in_features; ++k)
          l.weight[size_t(o) * size_t(l.k_padded) + size_t(k)] =
              tc_bits16(node.weight->values[size_t(o) * size_t(l.in_features) + size_t(k)], bf16);
      l.bias.assign(size_t(l.rows_padded), 0.0f);
      // The emulation rounds the bias to the format too.
      if (node.bias)
        for (int o = 0; o < l.units && o < int(node.bias->values.size()); ++o) {
          l.bias[size_t(o)] = tc_round16(node.bias->values[size_t(o)], bf16);
        }
      l.context = fmt::format("node '{}' (dense", node.name);
      plan.layers.push_back(std::move(l));
    } else if (const auto act = activation_of(node.op)) {
      if (!after_dense || plan.layers.back().act != Activation::None)
        return refuse(node, "an activation not directly after a dense layer");
      plan.layers.back().act = *act;
      plan.layers.back().context += fmt::format(" + {} '{}'", formats::op_name(node.op), node.name);
    } else if (node.op == OpType::Softmax) {
      if (plan.layers.empty()) return refuse(node, "a softmax before any dense layer");
      plan.softmax_node = i;
    } else {
      return refuse(node, "the tensor-core general path takes chains of dense layers so far");
    }
    cur = pn.output;
  }
  if (plan.layers.empty()) return std::string("no dense layer");
  if (graph.outputs[0] != cur) return fmt::format("the graph output '{}' is not the chain's end", graph.value(graph.outputs[0]).name);
  plan.output_value = cur;
  TcgLayer& last = plan.layers.back();
  last.last = true;
  last.ldy = last.units;
  for (TcgLayer& l : plan.layers) l.context += ")";
  plan.nodes.resize(graph.nodes.size());
  std::iota(plan.nodes.begin(), plan.nodes.end(), 0);
  return plan;
}

}  // namespace engine::custom::tcg

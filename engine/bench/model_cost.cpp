#include "engine/bench/model_cost.hpp"

namespace engine::bench {

ModelCost model_cost(const Graph& graph) {
  ModelCost c;
  const auto& in = graph.model->input;
  c.raw_input_bytes = double(formats::element_count(in.raw_shape)) * (in.dtype == formats::InputDType::UInt8 ? 1 : 4);
  c.input_value_bytes = double(graph.value(graph.input).elements) * 4;
  for (size_t i = 0; i < graph.outputs.size(); ++i) c.output_bytes += double(graph.output_elements(i)) * 4;
  for (const PlannedNode& p : graph.nodes) {
    const formats::Node& node = *p.node;
    NodeCost n;
    n.name = node.name;
    n.op = formats::op_name(node.op);
    const Value& out = graph.value(p.output);
    const Value& x = graph.value(p.inputs.at(0));
    const double elements = double(out.elements);
    const double window = double(node.window.kernel_h) * node.window.kernel_w;
    switch (node.op) {
      case OpType::Conv2D:
        n.multiply_adds = out.elements * x.shape.at(0) * int64_t(window);
        break;
      case OpType::Dense:
        n.multiply_adds = out.elements * x.elements;
        break;
      case OpType::AvgPool:
      case OpType::MaxPool:
        n.flops = elements * window;
        break;
      case OpType::Softmax:
        n.flops = 4 * elements;
        break;
      case OpType::Flatten:
        break;
      default:
        n.flops = elements;
        break;
    }
    if (n.multiply_adds) n.flops = 2.0 * double(n.multiply_adds);
    if (node.op != OpType::Flatten) {
      for (int v : p.inputs) n.bytes += double(graph.value(v).elements) * 4;
      n.bytes += elements * 4;
    }
    if (node.weight) n.weight_bytes += double(node.weight->values.size()) * 4;
    if (node.bias) n.weight_bytes += double(node.bias->values.size()) * 4;
    c.multiply_adds += n.multiply_adds;
    c.weight_bytes += n.weight_bytes;
    c.nodes.push_back(std::move(n));
  }
  c.flops = 2.0 * double(c.multiply_adds);
  return c;
}

}  // namespace engine::bench

#include "engine/core/train.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace engine {

std::vector<ParameterInfo> parameter_layout(const Graph& graph) {
  std::vector<ParameterInfo> out;
  int64_t offset = 0;
  for (const PlannedNode& planned : graph.nodes) {
    const formats::Node& node = *planned.node;
    for (const auto* tensor : {&node.weight, &node.bias}) {
      if (!tensor->has_value()) continue;
      ParameterInfo p;
      p.node = &node;
      p.is_bias = tensor == &node.bias;
      p.name = (*tensor)->name;
      p.shape = (*tensor)->shape;
      p.elements = formats::element_count(p.shape);
      p.offset = offset;
      offset += p.elements;
      out.push_back(std::move(p));
    }
  }
  return out;
}

void check_trainable(const Graph& graph) {
  const Value& out = graph.value(graph.outputs.at(0));
  if (out.producer < 0 || graph.nodes[size_t(out.producer)].node->op != OpType::Softmax)
    throw std::invalid_argument(fmt::format(
        "model '{}' cannot be trained: its first output '{}' must be a softmax node (the loss is cross-entropy on "
        "the softmax's input, the logits)",
        graph.model->name, out.name));
  if (parameter_layout(graph).empty())
    throw std::invalid_argument(
        fmt::format("model '{}' cannot be trained: it has no parameters (no conv2d, dense or scale_shift node)",
                    graph.model->name));
}

void check_optimizer_state(const OptimizerState& state, int64_t count, const std::string& who) {
  if (state.steps < 0) throw std::invalid_argument(fmt::format("{}: optimiser state with {} steps", who, state.steps));
  if (int64_t(state.first.size()) != count || int64_t(state.second.size()) != count)
    throw std::invalid_argument(fmt::format("{}: optimiser state of {} and {} floats for {} parameters", who,
                                            state.first.size(), state.second.size(), count));
}

}  // namespace engine

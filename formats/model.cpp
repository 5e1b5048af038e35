#include "formats/model.hpp"

#include "formats/error.hpp"

#include <array>
#include <stdexcept>
#include <utility>

namespace formats {

std::optional<int64_t> checked_element_count(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count)) return std::nullopt;
  }
  return count;
}

int64_t element_count(const Shape& shape) {
  // A Model's shapes were validated, so this only fires on a programming error; a wrong count
  // would size buffers wrongly, which is worse than an exception.
  const std::optional<int64_t> count = checked_element_count(shape);
  if (!count) throw std::overflow_error("element count of " + shape_to_string(shape) + " overflows");
  return *count;
}

std::string shape_to_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

namespace {
constexpr std::array<std::pair<OpType, const char*>, 12> kOpNames{{
    {OpType::Conv2D, "conv2d"},
    {OpType::AvgPool, "avgpool"},
    {OpType::MaxPool, "maxpool"},
    {OpType::Relu, "relu"},
    {OpType::Tanh, "tanh"},
    {OpType::Sigmoid, "sigmoid"},
    {OpType::Flatten, "flatten"},
    {OpType::Dense, "dense"},
    {OpType::Softmax, "softmax"},
    {OpType::Add, "add"},
    {OpType::ScaleShift, "scale_shift"},
    {OpType::Concat, "concat"},
}};
}  // namespace

const char* op_name(OpType op) {
  for (const auto& [type, name] : kOpNames) {
    if (type == op) return name;
  }
  return "unknown-op";
}

std::optional<OpType> op_from_name(const std::string& name) {
  for (const auto& [type, op] : kOpNames) {
    if (name == op) return type;
  }
  return std::nullopt;
}

const Node* Model::find_node(const std::string& node_name) const {
  for (const Node& node : nodes) {
    if (node.name == node_name) return &node;
  }
  return nullptr;
}

Shape Model::value_shape(const std::string& value) const {
  if (value == input.name) return input.shape;
  if (const Node* node = find_node(value)) return node->output_shape;
  throw std::out_of_range("model '" + name + "' has no value named '" + value + "'");
}

int64_t Model::parameter_count() const {
  int64_t total = 0;
  for (const Node& node : nodes) {
    if (node.weight) total += element_count(node.weight->shape);
    if (node.bias) total += element_count(node.bias->shape);
  }
  return total;
}

void require_weights(const Model& model) {
  if (model.has_weights) return;
  throw FormatError(model.source_path.empty() ? model.name : model.source_path,
                    "is an architecture-only graph (no \"weights\" key): it has no trained parameters to run; "
                    "train it first with `engine train " + (model.source_path.empty() ? model.name : model.source_path) +
                        " --data IMAGES -o OUT.json`");
}

}  // namespace formats

#include "tests/fuzz/fuzz_model_checks.hpp"

#include <set>

#include "formats/model_checks.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace fuzz {
namespace {

void check_tensor(const formats::Tensor& tensor) {
  const std::optional<int64_t> count = formats::checked_element_count(tensor.shape);
  require(count.has_value(), "a loaded tensor's element count overflows");
  require(static_cast<uint64_t>(*count) == tensor.values.size(),
          "a loaded tensor holds a different number of values than its shape");
}

void check_shape(const formats::Shape& shape) {
  require(!shape.empty(), "a loaded value has an empty shape");
  for (int64_t dim : shape) require(dim >= 1, "a loaded value has a dimension below 1");
  const std::optional<int64_t> count = formats::checked_element_count(shape);
  require(count && *count <= formats::kMaxValueElements, "a loaded value is over the size limit");
}

}  // namespace

void check_model(const formats::Model& model) {
  require(!model.name.empty(), "a loaded model has no name");
  require(!model.nodes.empty(), "a loaded model has no nodes");
  require(!model.outputs.empty(), "a loaded model has no outputs");
  check_shape(model.input.raw_shape);
  check_shape(model.input.shape);
  std::set<std::string> defined{model.input.name};
  for (const formats::Node& node : model.nodes) {
    for (const std::string& input : node.inputs) {
      require(defined.count(input) == 1, "a loaded node reads a value defined after it");
    }
    require(defined.insert(node.name).second, "a loaded model defines a value twice");
    check_shape(node.output_shape);
    if (node.weight) check_tensor(*node.weight);
    if (node.bias) check_tensor(*node.bias);
    const bool parametric = node.op == formats::OpType::Conv2D || node.op == formats::OpType::Dense ||
                            node.op == formats::OpType::ScaleShift;
    require(parametric == node.weight.has_value(), "a loaded node has a weight iff it needs one");
    if (node.op == formats::OpType::ScaleShift) {
      require(node.bias.has_value(), "a loaded scale_shift has no shift");
      require(node.weight->shape == formats::Shape{node.output_shape.at(0)} &&
                  node.bias->shape == formats::Shape{node.output_shape.at(0)},
              "a loaded scale_shift's scale and shift are not one per channel");
    }
    if (node.op == formats::OpType::Concat) {
      require(node.inputs.size() >= 2, "a loaded concat has fewer than two inputs");
      int64_t channels = 0;
      for (const std::string& input : node.inputs) channels += model.value_shape(input).at(0);
      require(channels == node.output_shape.at(0), "a loaded concat's channels are not its inputs' sum");
    }
  }
  for (const std::string& output : model.outputs) {
    require(defined.count(output) == 1, "a loaded output names no value");
    check_shape(model.value_shape(output));
  }
  if (!model.labels.empty()) {
    require(static_cast<int64_t>(model.labels.size()) ==
                formats::element_count(model.value_shape(model.outputs[0])),
            "a loaded model's labels do not match its first output");
  }
  (void)model.parameter_count();  // must not throw
}

}  // namespace fuzz

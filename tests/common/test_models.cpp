#include "tests/common/test_models.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "formats/model_loader.hpp"

namespace testing_support {
namespace {

formats::Tensor random_tensor(const std::string& name, formats::Shape shape, uint32_t seed, float bound) {
  formats::Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.values = random_floats(size_t(formats::element_count(t.shape)), seed, -bound, bound);
  return t;
}

// A given tensor keeps its values; its name follows the node so validation finds it.
formats::Tensor given_tensor(const formats::Tensor& t, const std::string& name) {
  formats::Tensor copy = t;
  copy.name = name;
  return copy;
}

std::shared_ptr<formats::Model> float_input_model(const std::string& name, const formats::Shape& input_shape) {
  auto model = std::make_shared<formats::Model>();
  model->name = name;
  model->input.name = "x";
  model->input.dtype = formats::InputDType::Float32;
  model->input.raw_shape = input_shape;
  model->input.shape = input_shape;
  return model;
}

}  // namespace

std::vector<float> random_floats(size_t count, uint32_t seed, float lo, float hi) {
  // mt19937 is specified bit for bit by the standard; the conversion to [lo, hi) is done here, not
  // by uniform_real_distribution, whose algorithm differs between standard libraries.
  std::mt19937 gen(seed);
  std::vector<float> out(count);
  for (auto& v : out) v = lo + (hi - lo) * float(double(gen()) / 4294967296.0);
  return out;
}

std::vector<uint8_t> random_bytes(size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> out(count);
  for (auto& v : out) v = uint8_t(gen() >> 24);
  return out;
}

std::shared_ptr<formats::Model> single_op_model(formats::OpType op, const formats::Shape& input_shape,
                                                const formats::Node& attrs_template, uint32_t seed,
                                                bool with_bias) {
  auto model = float_input_model(std::string("single_") + formats::op_name(op), input_shape);
  formats::Node node;
  node.name = "y";
  node.op = op;
  node.inputs = op == formats::OpType::Add || op == formats::OpType::Concat ? std::vector<std::string>{"x", "x"}
                                                                             : std::vector<std::string>{"x"};
  node.window = attrs_template.window;
  node.out_channels = attrs_template.out_channels;
  node.count_include_pad = attrs_template.count_include_pad;
  node.units = attrs_template.units;

  if (op == formats::OpType::Conv2D || op == formats::OpType::Dense) {
    formats::Shape weight_shape, bias_shape;
    int64_t fan_in = 0;
    if (op == formats::OpType::Conv2D) {
      if (input_shape.size() != 3) throw std::invalid_argument("single_op_model: conv2d needs a [C, H, W] input");
      weight_shape = {node.out_channels, input_shape[0], node.window.kernel_h, node.window.kernel_w};
      bias_shape = {node.out_channels};
      fan_in = input_shape[0] * node.window.kernel_h * node.window.kernel_w;
    } else {
      weight_shape = {node.units, formats::element_count(input_shape)};
      bias_shape = {node.units};
      fan_in = formats::element_count(input_shape);
    }
    const float bound = 1.0f / float(std::sqrt(double(std::max<int64_t>(fan_in, 1))));
    node.weight = attrs_template.weight ? given_tensor(*attrs_template.weight, "y.weight")
                                        : random_tensor("y.weight", weight_shape, seed, bound);
    if (with_bias)
      node.bias = attrs_template.bias ? given_tensor(*attrs_template.bias, "y.bias")
                                      : random_tensor("y.bias", bias_shape, seed + 1, bound);
  }
  if (op == formats::OpType::ScaleShift) {
    if (input_shape.empty()) throw std::invalid_argument("single_op_model: scale_shift needs a rank >= 1 input");
    const formats::Shape channels{input_shape[0]};
    node.weight = attrs_template.weight ? given_tensor(*attrs_template.weight, "y.scale")
                                        : random_tensor("y.scale", channels, seed, 2.0f);
    node.bias = attrs_template.bias ? given_tensor(*attrs_template.bias, "y.shift")
                                    : random_tensor("y.shift", channels, seed + 1, 1.0f);
  }
  model->nodes.push_back(std::move(node));
  model->outputs = {"y"};
  formats::validate_model(*model, std::string("single_op_model(") + formats::op_name(op) + ")");
  return model;
}

std::shared_ptr<formats::Model> add_dag_model(const formats::Shape& input_shape) {
  auto model = float_input_model("add_dag", input_shape);
  auto unary = [](const std::string& name, formats::OpType op, std::vector<std::string> inputs) {
    formats::Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    return n;
  };
  // Listed out of order on purpose: validation sorts them, as the loader does for files.
  model->nodes.push_back(unary("y", formats::OpType::Add, {"r", "t"}));
  model->nodes.push_back(unary("r", formats::OpType::Relu, {"x"}));
  model->nodes.push_back(unary("t", formats::OpType::Tanh, {"x"}));
  model->outputs = {"y"};
  formats::validate_model(*model, "add_dag_model");
  return model;
}

std::shared_ptr<formats::Model> concat_dag_model(const formats::Shape& input_shape) {
  auto model = float_input_model("concat_dag", input_shape);
  auto make = [](const std::string& name, formats::OpType op, std::vector<std::string> inputs) {
    formats::Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    return n;
  };
  // Out of order on purpose, as in add_dag_model.
  model->nodes.push_back(make("y", formats::OpType::Concat, {"c", "s"}));
  model->nodes.push_back(make("c", formats::OpType::Concat, {"r", "x", "t"}));
  model->nodes.push_back(make("r", formats::OpType::Relu, {"x"}));
  model->nodes.push_back(make("t", formats::OpType::Tanh, {"x"}));
  model->nodes.push_back(make("s", formats::OpType::Sigmoid, {"x"}));
  model->outputs = {"y"};
  formats::validate_model(*model, "concat_dag_model");
  return model;
}

std::string lenet5_path() { return std::string(ENGINE_SOURCE_DIR) + "/models/lenet5.json"; }

std::shared_ptr<formats::Model> lenet5_model() {
  const std::string path = lenet5_path();
  if (!std::filesystem::exists(path)) return nullptr;
  return std::make_shared<formats::Model>(formats::load_model(path));
}

}  // namespace testing_support

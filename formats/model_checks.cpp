#include "formats/model_checks.hpp"

#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <set>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"

namespace formats {
namespace {

[[noreturn]] void fail(const std::string& origin, const std::string& problem) {
  throw FormatError(origin, problem);
}

// Inputs an op takes; concat takes kMinConcatInputs..kMaxConcatInputs (0 here: checked apart).
int op_arity(OpType op) {
  if (op == OpType::Concat) return 0;
  return op == OpType::Add ? 2 : 1;
}

// A concat joins at least two values; the upper bound only keeps a small file from asking for
// millions of copies (the node limit bounds everything else the same way).
constexpr size_t kMinConcatInputs = 2;
constexpr size_t kMaxConcatInputs = kMaxNodes;

bool has_window(OpType op) {
  return op == OpType::Conv2D || op == OpType::AvgPool || op == OpType::MaxPool;
}

bool has_parameters(OpType op) {
  return op == OpType::Conv2D || op == OpType::Dense || op == OpType::ScaleShift;
}

// The file's role names: scale_shift keeps 'scale' in Node::weight and 'shift' in Node::bias.
const char* weight_role(OpType op) { return op == OpType::ScaleShift ? "scale" : "weight"; }
const char* bias_role(OpType op) { return op == OpType::ScaleShift ? "shift" : "bias"; }

std::string pair_text(int a, int b) { return std::to_string(a) + "×" + std::to_string(b); }

void check_window(const Node& node, const std::string& origin) {
  const Window2D& w = node.window;
  const std::string where = node_label(node) + ": ";
  if (w.kernel_h < 1 || w.kernel_w < 1) {
    fail(origin, where + "kernel must be at least 1 in each dimension, got " +
                     pair_text(w.kernel_h, w.kernel_w));
  }
  if (w.stride_h < 1 || w.stride_w < 1) {
    fail(origin, where + "stride must be at least 1 in each dimension, got " +
                     pair_text(w.stride_h, w.stride_w));
  }
  const int pads[4] = {w.pad_top, w.pad_bottom, w.pad_left, w.pad_right};
  const char* names[4] = {"top", "bottom", "left", "right"};
  for (int i = 0; i < 4; ++i) {
    const int kernel = i < 2 ? w.kernel_h : w.kernel_w;
    if (pads[i] < 0) {
      fail(origin, where + "padding " + names[i] + " is " + std::to_string(pads[i]) +
                       "; padding must be 0 or more");
    }
    // A padding as large as the kernel would let a window see only padding.
    if (pads[i] >= kernel) {
      fail(origin, where + "padding " + names[i] + " is " + std::to_string(pads[i]) +
                       ", but must be smaller than the kernel (" +
                       pair_text(w.kernel_h, w.kernel_w) + ")");
    }
  }
}

std::string tensor_label(const char* role, const Tensor& tensor) {
  return std::string(role) + (tensor.name.empty() ? "" : " tensor '" + tensor.name + "'");
}

// Parameters built in code may disagree with their own shape; files cannot (the loader fills
// values from the shape).
void check_tensor_values(const Node& node, const char* role, const Tensor& tensor,
                         const std::string& origin) {
  const std::optional<int64_t> count = checked_element_count(tensor.shape);
  if (!count || static_cast<uint64_t>(*count) != tensor.values.size()) {
    fail(origin, node_label(node) + ": " + tensor_label(role, tensor) + " holds " +
                     std::to_string(tensor.values.size()) + " values, but its shape " +
                     shape_to_string(tensor.shape) + " needs " +
                     (count ? std::to_string(*count) : std::string("an impossible number")));
  }
}

void expect_tensor_shape(const Node& node, const char* role, const Tensor& tensor,
                         const Shape& expected, const std::string& why,
                         const std::string& origin) {
  if (tensor.shape != expected) {
    fail(origin, node_label(node) + ": " + tensor_label(role, tensor) + " has shape " +
                     shape_to_string(tensor.shape) + ", expected " + shape_to_string(expected) +
                     why);
  }
}

// out = floor((in + before + after - kernel) / stride) + 1, and at least 1.
int64_t window_output(const Node& node, const Shape& input, const char* axis, int64_t in,
                      int kernel, int stride, int before, int after, const std::string& origin) {
  const int64_t span = in + before + after;
  if (span < kernel) {
    fail(origin, node_label(node) + ": " + op_name(node.op) + " kernel " +
                     pair_text(node.window.kernel_h, node.window.kernel_w) +
                     " does not fit the input " + shape_to_string(input) + " (" + axis + " " +
                     std::to_string(in) + " plus padding " + std::to_string(before) + "+" +
                     std::to_string(after) + " is smaller than the kernel)");
  }
  return (span - kernel) / stride + 1;
}

void expect_rank(const Node& node, const Shape& input, size_t rank, const std::string& layout,
                 const std::string& hint, const std::string& origin) {
  if (input.size() != rank) {
    fail(origin, node_label(node) + ": " + op_name(node.op) + " needs a rank-" +
                     std::to_string(rank) + " input " + layout + ", but input '" +
                     node.inputs[0] + "' has shape " + shape_to_string(input) + hint);
  }
}

Shape output_shape(const Node& node, const std::vector<Shape>& inputs,
                   const std::string& origin) {
  const Shape& in = inputs[0];
  const Window2D& w = node.window;
  switch (node.op) {
    case OpType::Conv2D: {
      expect_rank(node, in, 3, "[C, H, W]", "", origin);
      const Tensor& weight = *node.weight;
      const Shape expected{node.out_channels, in[0], w.kernel_h, w.kernel_w};
      expect_tensor_shape(node, "weight", weight, expected,
                          " (out_channels " + std::to_string(node.out_channels) + ", input '" +
                              node.inputs[0] + "' has " + count_of(in[0], "channel") +
                              ", kernel " + pair_text(w.kernel_h, w.kernel_w) + ")",
                          origin);
      const int64_t oh = window_output(node, in, "height", in[1], w.kernel_h, w.stride_h,
                                       w.pad_top, w.pad_bottom, origin);
      const int64_t ow = window_output(node, in, "width", in[2], w.kernel_w, w.stride_w,
                                       w.pad_left, w.pad_right, origin);
      return {node.out_channels, oh, ow};
    }
    case OpType::AvgPool:
    case OpType::MaxPool: {
      expect_rank(node, in, 3, "[C, H, W]", "", origin);
      const int64_t oh = window_output(node, in, "height", in[1], w.kernel_h, w.stride_h,
                                       w.pad_top, w.pad_bottom, origin);
      const int64_t ow = window_output(node, in, "width", in[2], w.kernel_w, w.stride_w,
                                       w.pad_left, w.pad_right, origin);
      return {in[0], oh, ow};
    }
    case OpType::Relu:
    case OpType::Tanh:
    case OpType::Sigmoid:
      return in;
    case OpType::Flatten:
      return {element_count(in)};
    case OpType::Dense: {
      expect_rank(node, in, 1, "[K]", in.size() > 1 ? " (add a flatten node before it)" : "",
                  origin);
      const Tensor& weight = *node.weight;
      expect_tensor_shape(node, "weight", weight, Shape{node.units, in[0]},
                          " (units " + std::to_string(node.units) + ", input '" +
                              node.inputs[0] + "' has " + std::to_string(in[0]) + " elements)",
                          origin);
      return {node.units};
    }
    case OpType::Softmax:
      expect_rank(node, in, 1, "[K]", in.size() > 1 ? " (add a flatten node before it)" : "",
                  origin);
      return in;
    case OpType::ScaleShift: {
      // One scale and one shift per channel: dim 0 of the per-sample shape ([C, H, W], or the
      // features of a [F] value).
      const std::string why = " (one per channel: input '" + node.inputs[0] + "' has shape " +
                              shape_to_string(in) + ", channels are its first dimension)";
      expect_tensor_shape(node, "scale", *node.weight, Shape{in[0]}, why, origin);
      expect_tensor_shape(node, "shift", *node.bias, Shape{in[0]}, why, origin);
      return in;
    }
    case OpType::Concat: {
      // Along dim 0 (channels of [C, H, W], features of [F]); every other dimension must agree.
      Shape out = in;
      for (size_t i = 1; i < inputs.size(); ++i) {
        const Shape& other = inputs[i];
        bool same_rest = other.size() == in.size();
        for (size_t d = 1; same_rest && d < in.size(); ++d) same_rest = other[d] == in[d];
        if (!same_rest) {
          fail(origin, node_label(node) + ": concat joins along the first (channel) dimension, so "
                           "every other dimension must be equal, but '" + node.inputs[0] +
                           "' is " + shape_to_string(in) + " and '" + node.inputs[i] + "' is " +
                           shape_to_string(other));
        }
        out[0] += other[0];  // each term is below 2^31 and there are at most 4096
      }
      return out;
    }
    case OpType::Add:
      if (inputs[0] != inputs[1]) {
        fail(origin, node_label(node) + ": add needs inputs of equal shape, but '" +
                         node.inputs[0] + "' is " + shape_to_string(inputs[0]) + " and '" +
                         node.inputs[1] + "' is " + shape_to_string(inputs[1]));
      }
      return in;
  }
  fail(origin, node_label(node) + ": unknown op");
}

void check_parameters(const Node& node, const std::string& origin) {
  if (!has_parameters(node.op)) {
    if (node.weight || node.bias) {
      fail(origin, node_label(node) + ": " + op_name(node.op) + " takes no weight or bias");
    }
    return;
  }
  const char* weight = weight_role(node.op);
  const char* bias = bias_role(node.op);
  if (!node.weight) {
    fail(origin, node_label(node) + ": " + op_name(node.op) + " needs a " + weight + " tensor");
  }
  check_tensor_values(node, weight, *node.weight, origin);
  if (node.op == OpType::ScaleShift) {
    // Both tensors are required; their shapes depend on the input and are checked with it.
    if (!node.bias) fail(origin, node_label(node) + ": scale_shift needs a shift tensor");
    check_tensor_values(node, bias, *node.bias, origin);
    return;
  }
  if (node.bias) {
    check_tensor_values(node, bias, *node.bias, origin);
    const int64_t out = node.op == OpType::Conv2D ? node.out_channels : node.units;
    expect_tensor_shape(node, "bias", *node.bias, Shape{out},
                        node.op == OpType::Conv2D ? " (out_channels " + std::to_string(out) + ")"
                                                  : " (units " + std::to_string(out) + ")",
                        origin);
  }
}

// An architecture-only model's tensors (named by the loader, shapeless) get the shape the node
// needs and zero values. The count is checked before allocating: a kernel of 2^31 x 2^31 is a few
// bytes of JSON.
constexpr int64_t kMaxArchitectureTensorElements = int64_t{1} << 28;  // 1 GiB of float32
void size_architecture_tensors(Node& node, const Shape& in, const std::string& origin) {
  auto size = [&](std::optional<Tensor>& t, Shape shape) {
    if (!t || !t->shape.empty()) return;
    const std::optional<int64_t> count = checked_element_count(shape);
    if (!count || *count > kMaxArchitectureTensorElements) {
      fail(origin, node_label(node) + ": tensor '" + t->name + "' would have shape " +
                       shape_to_string(shape) + ", more than " +
                       std::to_string(kMaxArchitectureTensorElements) + " values");
    }
    t->shape = std::move(shape);
    t->values.assign(static_cast<size_t>(*count), 0.0f);
  };
  const int64_t channels = in.empty() ? 1 : in[0];
  switch (node.op) {
    case OpType::Conv2D:
      size(node.weight, {node.out_channels, channels, node.window.kernel_h, node.window.kernel_w});
      size(node.bias, {node.out_channels});
      break;
    case OpType::Dense:
      size(node.weight, {node.units, channels});
      size(node.bias, {node.units});
      break;
    case OpType::ScaleShift:
      size(node.weight, {channels});
      size(node.bias, {channels});
      break;
    default: break;
  }
}

}  // namespace

std::string node_label(const Node& node) { return "node '" + node.name + "'"; }

void check_input(InputSpec& input, const std::string& origin) {
  if (input.name.empty()) fail(origin, "input: name must not be empty");
  const Shape& raw = input.raw_shape;
  if (input.dtype == InputDType::UInt8) {
    if (raw.size() != 3) {
      fail(origin, "input: a uint8 input has shape [C, H, W], got " + shape_to_string(raw));
    }
    if (!input.preprocess) {
      fail(origin, "input: a uint8 input needs 'preprocess' (scale, mean, std) to become float32");
    }
  } else {
    if (raw.empty() || raw.size() > 3) {
      fail(origin, "input: a float32 input has rank 1 to 3, got shape " + shape_to_string(raw));
    }
    if (input.preprocess) {
      fail(origin, "input: a float32 input is already preprocessed and must not have "
                   "'preprocess'");
    }
  }
  for (int64_t dim : raw) {
    if (dim < 1) {
      fail(origin, "input: shape " + shape_to_string(raw) +
                       " has a dimension below 1; dimensions must be positive");
    }
  }
  const std::optional<int64_t> raw_count = checked_element_count(raw);
  if (!raw_count || *raw_count > kMaxValueElements) {
    fail(origin, "input: shape " + shape_to_string(raw) + " has more than " +
                     std::to_string(kMaxValueElements) + " elements per sample");
  }
  if (!input.preprocess) {
    input.shape = raw;
    return;
  }

  const Preprocess& p = *input.preprocess;
  const size_t channels = static_cast<size_t>(raw[0]);
  if (!std::isfinite(p.scale) || p.scale <= 0) {
    fail(origin, "input.preprocess: scale must be a positive finite number, got " +
                     std::to_string(p.scale));
  }
  if (p.mean.size() != channels || p.std.size() != channels) {
    fail(origin, "input.preprocess: mean and std need one entry per channel (" +
                     std::to_string(channels) + "), got " + std::to_string(p.mean.size()) +
                     " and " + std::to_string(p.std.size()));
  }
  for (size_t c = 0; c < channels; ++c) {
    if (!std::isfinite(p.mean[c])) {
      fail(origin, "input.preprocess: mean[" + std::to_string(c) + "] is not a finite number");
    }
    if (!std::isfinite(p.std[c]) || p.std[c] <= 0) {
      fail(origin, "input.preprocess: std[" + std::to_string(c) +
                       "] must be a positive finite number, got " + std::to_string(p.std[c]));
    }
  }
  const int pads[4] = {p.pad_top, p.pad_bottom, p.pad_left, p.pad_right};
  for (int pad : pads) {
    if (pad < 0) {
      fail(origin, "input.preprocess: pad entries must be 0 or more, got " + std::to_string(pad));
    }
  }
  if (!std::isfinite(p.pad_value)) {
    fail(origin, "input.preprocess: pad_value must be a finite number");
  }
  input.shape = {raw[0], raw[1] + p.pad_top + p.pad_bottom, raw[2] + p.pad_left + p.pad_right};
  const std::optional<int64_t> count = checked_element_count(input.shape);
  if (!count || *count > kMaxValueElements) {
    fail(origin, "input: padded shape " + shape_to_string(input.shape) + " has more than " +
                     std::to_string(kMaxValueElements) + " elements per sample");
  }
}

void check_node_attributes(const Node& node, const std::string& origin) {
  if (node.name.empty()) fail(origin, "a node has an empty name");
  if (node.op == OpType::Concat) {
    if (node.inputs.size() < kMinConcatInputs || node.inputs.size() > kMaxConcatInputs) {
      fail(origin, node_label(node) + ": concat takes " + std::to_string(kMinConcatInputs) + " to " +
                       std::to_string(kMaxConcatInputs) + " inputs, got " +
                       std::to_string(node.inputs.size()));
    }
  }
  const size_t arity = static_cast<size_t>(op_arity(node.op));
  if (node.op != OpType::Concat && node.inputs.size() != arity) {
    fail(origin, node_label(node) + ": " + op_name(node.op) + " takes " + std::to_string(arity) +
                     (arity == 1 ? " input" : " inputs") + ", got " +
                     std::to_string(node.inputs.size()));
  }
  if (has_window(node.op)) check_window(node, origin);
  if (node.op == OpType::Conv2D && node.out_channels < 1) {
    fail(origin, node_label(node) + ": out_channels must be at least 1, got " +
                     std::to_string(node.out_channels));
  }
  if (node.op == OpType::Dense && node.units < 1) {
    fail(origin, node_label(node) + ": units must be at least 1, got " +
                     std::to_string(node.units));
  }
}

std::vector<size_t> check_names_and_sort(Model& model, const std::string& origin) {
  if (model.nodes.size() > kMaxNodes) {
    fail(origin, "the graph has " + std::to_string(model.nodes.size()) + " nodes, more than the limit of " +
                     std::to_string(kMaxNodes));
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& node = model.nodes[i];
    if (node.name.empty()) fail(origin, "a node has an empty name");
    if (node.name == model.input.name) {
      fail(origin, node_label(node) + " has the same name as the model input; value names "
                                       "must be unique");
    }
    if (!index.emplace(node.name, i).second) {
      fail(origin, "two nodes are named '" + node.name + "'; node names must be unique");
    }
  }
  for (const Node& node : model.nodes) {
    for (const std::string& input : node.inputs) {
      if (input != model.input.name && !index.count(input)) {
        fail(origin, node_label(node) + ": input '" + input +
                         "' is neither the model input nor the name of a node");
      }
    }
  }
  if (model.outputs.empty()) fail(origin, "outputs must list at least one value");
  std::set<std::string> outputs;
  for (const std::string& output : model.outputs) {
    if (!outputs.insert(output).second) fail(origin, "output '" + output + "' is listed twice");
    if (output == model.input.name) {
      fail(origin, "output '" + output + "' is the model input; outputs must be node outputs");
    }
    if (!index.count(output)) fail(origin, "output '" + output + "' is not the name of a node");
  }

  // Kahn's algorithm; taking the lowest file index among ready nodes keeps file order wherever
  // the dependencies allow it.
  const size_t n = model.nodes.size();
  std::vector<size_t> pending(n, 0);
  std::vector<std::vector<size_t>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    for (const std::string& input : model.nodes[i].inputs) {
      const auto it = index.find(input);
      if (it == index.end()) continue;  // the model input
      ++pending[i];
      consumers[it->second].push_back(i);
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t consumer : consumers[i]) {
      if (--pending[consumer] == 0) ready.push(consumer);
    }
  }
  if (order.size() != n) {
    // Every node left has an unprocessed producer; walking producers must revisit a node.
    size_t at = 0;
    while (pending[at] == 0) ++at;
    std::vector<size_t> path;
    std::vector<int> position(n, -1);
    while (position[at] < 0) {
      position[at] = static_cast<int>(path.size());
      path.push_back(at);
      for (const std::string& input : model.nodes[at].inputs) {
        const auto it = index.find(input);
        if (it != index.end() && pending[it->second] > 0) {
          at = it->second;
          break;
        }
      }
    }
    // path[position[at]..] walks against the data flow; print it along the flow.
    std::string cycle = "'" + model.nodes[at].name + "'";
    for (size_t k = path.size(); k-- > static_cast<size_t>(position[at]);) {
      cycle += " -> '" + model.nodes[path[k]].name + "'";
    }
    fail(origin, "the graph has a cycle: " + cycle + " (each node feeds the next)");
  }

  std::vector<Node> sorted;
  sorted.reserve(n);
  for (size_t i : order) sorted.push_back(std::move(model.nodes[i]));
  model.nodes = std::move(sorted);
  return order;
}

void propagate_shapes(Model& model, const std::string& origin) {
  std::map<std::string, Shape> shapes{{model.input.name, model.input.shape}};
  for (Node& node : model.nodes) {
    std::vector<Shape> inputs;
    for (const std::string& input : node.inputs) inputs.push_back(shapes.at(input));
    if (!model.has_weights) size_architecture_tensors(node, inputs[0], origin);
    check_parameters(node, origin);
    Shape shape = output_shape(node, inputs, origin);
    const std::optional<int64_t> count = checked_element_count(shape);
    if (!count || *count > kMaxValueElements) {
      fail(origin, node_label(node) + ": output shape " + shape_to_string(shape) +
                       " has more than " + std::to_string(kMaxValueElements) +
                       " elements per sample");
    }
    node.output_shape = shape;
    shapes[node.name] = std::move(shape);
  }
  if (!model.labels.empty()) {
    const int64_t classes = element_count(shapes.at(model.outputs.at(0)));
    if (static_cast<int64_t>(model.labels.size()) != classes) {
      fail(origin, "labels has " + count_of(model.labels.size(), "entry") +
                       ", but the first output '" + model.outputs[0] + "' has " +
                       std::to_string(classes) + " elements");
    }
  }
}

}  // namespace formats

#include "formats/model_loader.hpp"

#include <algorithm>
#include <cmath>
#include <climits>
#include <filesystem>
#include <map>
#include <utility>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/model_checks.hpp"
#include "formats/safetensors.hpp"
#include "formats/sha256.hpp"
#include "formats/strict_json.hpp"

namespace formats {
namespace {

using Json = nlohmann::ordered_json;

constexpr uint64_t kMaxGraphFileBytes = uint64_t{16} << 20;  // model-format-v1.md, step 1

// One JSON object being read. allow() rejects keys outside the object's schema before any value
// is read, so a misspelt key is reported as such rather than as the correct key being missing.
class ObjectReader {
 public:
  ObjectReader(const Json& object, std::string where, const std::string& file)
      : object_(object), where_(std::move(where)), file_(file) {}

  const Json* find(const std::string& key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  const Json& require(const std::string& key) const {
    const Json* value = find(key);
    if (!value) fail("missing required key '" + key + "'");
    return *value;
  }
  // `noun` names what the keys are ("attribute"); `expected`, when given, replaces the list of
  // allowed keys in the message (e.g. "relu takes no attributes").
  void allow(const std::vector<std::string>& keys, const char* noun = "key",
             const std::string& expected = "") const {
    for (const auto& [key, value] : object_.items()) {
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      std::string list = expected;
      for (size_t i = 0; expected.empty() && i < keys.size(); ++i) list += (i ? ", " : "") + keys[i];
      fail("unknown " + std::string(noun) + " '" + key + "' (expected: " + list + ")");
    }
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw FormatError(file_, where_.empty() ? problem : where_ + ": " + problem);
  }

 private:
  const Json& object_;
  std::string where_;
  const std::string& file_;
};

// Typed access to a value found by an ObjectReader; `key` names it in messages.
class Field {
 public:
  Field(ObjectReader& reader, const Json& value, std::string key)
      : reader_(reader), value_(value), key_(std::move(key)) {}

  std::string string() const {
    if (!value_.is_string()) wrong_type("a string");
    return value_.get<std::string>();
  }
  bool boolean() const {
    if (!value_.is_boolean()) wrong_type("true or false");
    return value_.get<bool>();
  }
  double number() const {
    if (!value_.is_number()) wrong_type("a number");
    return value_.get<double>();
  }
  int64_t int64() const { return to_int64(value_, "an integer"); }
  int int32() const { return to_int(value_, "an integer"); }
  const Json& object() const {
    if (!value_.is_object()) wrong_type("an object");
    return value_;
  }
  const Json& array() const {
    if (!value_.is_array()) wrong_type("an array");
    return value_;
  }
  std::vector<std::string> strings() const {
    std::vector<std::string> out;
    if (!value_.is_array()) wrong_type("an array of strings");
    for (const Json& item : value_) {
      if (!item.is_string()) wrong_type("an array of strings");
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  std::vector<float> numbers() const {
    std::vector<float> out;
    if (!value_.is_array()) wrong_type("an array of numbers");
    for (const Json& item : value_) {
      if (!item.is_number()) wrong_type("an array of numbers");
      out.push_back(static_cast<float>(item.get<double>()));
    }
    return out;
  }
  Shape shape() const {
    Shape out;
    if (!value_.is_array()) wrong_type("an array of integers");
    for (const Json& item : value_) out.push_back(to_int64(item, "an array of integers"));
    return out;
  }
  // Exactly `count` integers, e.g. a [h, w] pair; `layout` shows the expected form.
  std::vector<int> ints(size_t count, const std::string& layout) const {
    const std::string expected = "an array of " + std::to_string(count) + " integers " + layout;
    if (!value_.is_array() || value_.size() != count) wrong_type(expected);
    std::vector<int> out;
    for (const Json& item : value_) out.push_back(to_int(item, expected));
    return out;
  }

 private:
  [[noreturn]] void wrong_type(const std::string& expected) const {
    std::string got = value_.dump();
    if (got.size() > 60) got = std::string(value_.type_name());
    reader_.fail("'" + key_ + "' must be " + expected + ", got " + got);
  }
  int64_t to_int64(const Json& item, const std::string& expected) const {
    if (!item.is_number_integer()) wrong_type(expected);
    if (item.is_number_unsigned() && item.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      reader_.fail("'" + key_ + "' value " + item.dump() + " is too large");
    }
    return item.get<int64_t>();
  }
  int to_int(const Json& item, const std::string& expected) const {
    const int64_t value = to_int64(item, expected);
    if (value < INT_MIN || value > INT_MAX) {
      reader_.fail("'" + key_ + "' value " + std::to_string(value) + " is out of range");
    }
    return static_cast<int>(value);
  }

  ObjectReader& reader_;
  const Json& value_;
  std::string key_;
};

// What the graph file says about tensors: (role, tensor name) per node, in file order.
using TensorRoles = std::vector<std::pair<std::string, std::string>>;

struct ParsedGraph {
  Model model;
  std::string weights_file;
  std::string weights_sha256;
  bool labels_present = false;
  std::vector<TensorRoles> roles;  // parallel to model.nodes
};

bool is_lower_hex_digest(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void parse_window(ObjectReader& attrs, Node& node, bool stride_defaults_to_kernel) {
  const std::vector<int> kernel = Field(attrs, attrs.require("kernel"), "kernel").ints(2, "[kh, kw]");
  node.window.kernel_h = kernel[0];
  node.window.kernel_w = kernel[1];
  std::vector<int> stride = stride_defaults_to_kernel ? kernel : std::vector<int>{1, 1};
  if (const Json* value = attrs.find("stride")) stride = Field(attrs, *value, "stride").ints(2, "[sh, sw]");
  node.window.stride_h = stride[0];
  node.window.stride_w = stride[1];
  if (const Json* value = attrs.find("padding")) {
    const std::vector<int> pad = Field(attrs, *value, "padding").ints(4, "[top, bottom, left, right]");
    node.window.pad_top = pad[0];
    node.window.pad_bottom = pad[1];
    node.window.pad_left = pad[2];
    node.window.pad_right = pad[3];
  }
}

void parse_attributes(const Json* value, Node& node, const std::string& where,
                      const std::string& file) {
  static const Json kEmpty = Json::object();
  ObjectReader outer(kEmpty, where, file);
  if (value && !value->is_object()) Field(outer, *value, "attrs").object();
  ObjectReader attrs(value ? *value : kEmpty, where + ": attrs", file);
  switch (node.op) {
    case OpType::Conv2D:
      attrs.allow({"out_channels", "kernel", "stride", "padding"}, "attribute");
      node.out_channels = Field(attrs, attrs.require("out_channels"), "out_channels").int32();
      parse_window(attrs, node, false);
      break;
    case OpType::AvgPool:
      attrs.allow({"kernel", "stride", "padding", "count_include_pad"}, "attribute");
      parse_window(attrs, node, true);
      node.count_include_pad =
          Field(attrs, attrs.require("count_include_pad"), "count_include_pad").boolean();
      break;
    case OpType::MaxPool:
      attrs.allow({"kernel", "stride", "padding"}, "attribute");
      parse_window(attrs, node, true);
      break;
    case OpType::Dense:
      attrs.allow({"units"}, "attribute");
      node.units = Field(attrs, attrs.require("units"), "units").int32();
      break;
    default:
      attrs.allow({}, "attribute", std::string(op_name(node.op)) + " takes no attributes");
      break;
  }
}

TensorRoles parse_tensor_roles(const Json* value, const Node& node, const std::string& where,
                               const std::string& file) {
  static const Json kEmpty = Json::object();
  ObjectReader outer(kEmpty, where, file);
  if (value && !value->is_object()) Field(outer, *value, "tensors").object();
  ObjectReader tensors(value ? *value : kEmpty, where + ": tensors", file);
  TensorRoles roles;
  if (node.op == OpType::Conv2D || node.op == OpType::Dense) {
    tensors.allow({"weight", "bias"}, "tensor role");
    const Json* weight = tensors.find("weight");
    if (!weight) {
      tensors.fail(std::string(op_name(node.op)) + " needs a 'weight' tensor");
    }
    roles.emplace_back("weight", Field(tensors, *weight, "weight").string());
    if (const Json* bias = tensors.find("bias")) {
      roles.emplace_back("bias", Field(tensors, *bias, "bias").string());
    }
  } else if (node.op == OpType::ScaleShift) {
    tensors.allow({"scale", "shift"}, "tensor role");
    for (const char* role : {"scale", "shift"}) {
      const Json* name = tensors.find(role);
      if (!name) tensors.fail(std::string("scale_shift needs a '") + role + "' tensor");
      roles.emplace_back(role, Field(tensors, *name, role).string());
    }
  } else {
    tensors.allow({}, "tensor role", std::string(op_name(node.op)) + " has no tensors");
  }
  for (const auto& [role, name] : roles) {
    if (name.empty()) tensors.fail("'" + role + "' names an empty tensor name");
  }
  return roles;
}

Node parse_node(const Json& value, size_t position, const std::string& file, TensorRoles& roles) {
  std::string where = "nodes[" + std::to_string(position) + "]";
  if (!value.is_object()) {
    throw FormatError(file, where + " must be an object, got " + std::string(value.type_name()));
  }
  // The user's own name for the node is the clearest way to point at it, once it is usable.
  const auto name = value.find("name");
  if (name != value.end() && name->is_string() && !name->get<std::string>().empty()) {
    where = "node '" + name->get<std::string>() + "'";
  }
  ObjectReader named(value, where, file);
  named.allow({"name", "op", "inputs", "attrs", "tensors"});
  Node node;
  node.name = Field(named, named.require("name"), "name").string();
  if (node.name.empty()) named.fail("'name' must not be empty");
  const std::string op = Field(named, named.require("op"), "op").string();
  const std::optional<OpType> type = op_from_name(op);
  if (!type) {
    named.fail("unknown op '" + op + "' (expected one of: conv2d, avgpool, maxpool, relu, tanh, "
               "sigmoid, flatten, dense, softmax, add, scale_shift, concat)");
  }
  node.op = *type;
  node.inputs = Field(named, named.require("inputs"), "inputs").strings();
  parse_attributes(named.find("attrs"), node, where, file);
  roles = parse_tensor_roles(named.find("tensors"), node, where, file);
  check_node_attributes(node, file);
  return node;
}

void parse_input(const Json& value, InputSpec& input, const std::string& file) {
  ObjectReader reader(value, "input", file);
  reader.allow({"name", "dtype", "shape", "preprocess"});
  input.name = Field(reader, reader.require("name"), "name").string();
  const std::string dtype = Field(reader, reader.require("dtype"), "dtype").string();
  if (dtype == "uint8") {
    input.dtype = InputDType::UInt8;
  } else if (dtype == "float32") {
    input.dtype = InputDType::Float32;
  } else {
    reader.fail("dtype must be \"uint8\" or \"float32\", got \"" + dtype + "\"");
  }
  input.raw_shape = Field(reader, reader.require("shape"), "shape").shape();
  if (const Json* pre = reader.find("preprocess")) {
    ObjectReader p(Field(reader, *pre, "preprocess").object(), "input.preprocess", file);
    p.allow({"scale", "mean", "std", "pad", "pad_value"});
    Preprocess preprocess;
    preprocess.scale = static_cast<float>(Field(p, p.require("scale"), "scale").number());
    preprocess.mean = Field(p, p.require("mean"), "mean").numbers();
    preprocess.std = Field(p, p.require("std"), "std").numbers();
    if (const Json* pad = p.find("pad")) {
      const std::vector<int> pads = Field(p, *pad, "pad").ints(4, "[top, bottom, left, right]");
      preprocess.pad_top = pads[0];
      preprocess.pad_bottom = pads[1];
      preprocess.pad_left = pads[2];
      preprocess.pad_right = pads[3];
    }
    if (const Json* pad_value = p.find("pad_value")) {
      preprocess.pad_value = static_cast<float>(Field(p, *pad_value, "pad_value").number());
    }
    input.preprocess = std::move(preprocess);
  }
  check_input(input, file);
}

// "calibration" (model-format-v1.md, "Calibration"): its keys and numbers here; that every range
// names a value of the graph is checked once the names are known (check_calibration_names).
Calibration parse_calibration(const Json& json, const std::string& file) {
  ObjectReader r(json, "calibration", file);
  r.allow({"method", "percentile", "images", "data", "ranges"});
  Calibration c;
  c.method = Field(r, r.require("method"), "method").string();
  if (c.method != "max" && c.method != "percentile")
    r.fail("'method' must be \"max\" or \"percentile\", got \"" + c.method + "\"");
  const Json* percentile = r.find("percentile");
  if (c.method == "percentile") {
    if (!percentile) r.fail("method \"percentile\" needs 'percentile' (the share of |x| kept, in percent)");
    c.percentile = Field(r, *percentile, "percentile").number();
    if (!(c.percentile > 0 && c.percentile <= 100)) r.fail("'percentile' must be in (0, 100]");
  } else if (percentile) {
    r.fail("'percentile' belongs to method \"percentile\" only");
  }
  c.images = Field(r, r.require("images"), "images").int64();
  if (c.images < 1) r.fail("'images' must be at least 1");
  if (const Json* data = r.find("data")) c.data = Field(r, *data, "data").string();
  const Json& ranges = Field(r, r.require("ranges"), "ranges").object();
  if (ranges.empty()) r.fail("'ranges' must name at least one value");
  ObjectReader rr(ranges, "calibration.ranges", file);
  for (const auto& [name, value] : ranges.items()) {
    const double v = Field(rr, value, name).number();
    if (!(v >= 0) || !std::isfinite(v)) rr.fail("the range of '" + name + "' must be a finite number >= 0");
    c.ranges.emplace_back(name, v);
  }
  return c;
}

void check_calibration_names(const Model& model, const std::string& file) {
  if (!model.calibration) return;
  for (const auto& [name, range] : model.calibration->ranges) {
    if (name == model.input.name || model.find_node(name)) continue;
    throw FormatError(file, "calibration.ranges: '" + name + "' is not the input or a node of the graph");
  }
}

// Steps 1 and 2 of "What a loader checks": keys and types, format and version, input, nodes.
// `format` and `version` are read before the other keys so that a file of another version is
// reported as such rather than as a list of keys this version does not know.
ParsedGraph parse_graph(const Json& root, const std::string& file) {
  if (!root.is_object()) {
    throw FormatError(file, "the graph file must hold a JSON object, got " +
                                std::string(root.type_name()));
  }
  ObjectReader top(root, "", file);
  const std::string format = Field(top, top.require("format"), "format").string();
  if (format != "cnn-engine-model") {
    top.fail("'format' must be \"cnn-engine-model\", got \"" + format + "\" (not a model graph file?)");
  }
  const int64_t version = Field(top, top.require("version"), "version").int64();
  if (version != 1) {
    top.fail("unsupported version " + std::to_string(version) + " (this engine reads version 1)");
  }

  top.allow({"format", "version", "name", "description", "weights", "input", "labels", "nodes",
             "outputs", "calibration"});
  ParsedGraph graph;
  Model& model = graph.model;
  model.source_path = file;
  model.name = Field(top, top.require("name"), "name").string();
  if (const Json* description = top.find("description")) {
    model.description = Field(top, *description, "description").string();
  }
  // No "weights": an architecture-only graph (model-format-v1.md, amended).
  const Json* weights = top.find("weights");
  if (weights) Field(top, *weights, "weights").object();
  const Json& input = Field(top, top.require("input"), "input").object();
  if (const Json* labels = top.find("labels")) {
    model.labels = Field(top, *labels, "labels").strings();
    graph.labels_present = true;
  }
  const Json& nodes = Field(top, top.require("nodes"), "nodes").array();
  model.outputs = Field(top, top.require("outputs"), "outputs").strings();

  if (model.name.empty()) top.fail("'name' must not be empty");
  model.has_weights = weights != nullptr;
  if (weights) {
    ObjectReader weights_reader(*weights, "weights", file);
    weights_reader.allow({"file", "sha256"});
    graph.weights_file = Field(weights_reader, weights_reader.require("file"), "file").string();
    graph.weights_sha256 = Field(weights_reader, weights_reader.require("sha256"), "sha256").string();
    if (graph.weights_file.empty()) weights_reader.fail("'file' must not be empty");
    if (!is_lower_hex_digest(graph.weights_sha256)) {
      weights_reader.fail("'sha256' must be 64 lowercase hex digits, got \"" +
                          graph.weights_sha256 + "\"");
    }
  }

  if (const Json* calibration = top.find("calibration")) {
    Field(top, *calibration, "calibration").object();
    model.calibration = parse_calibration(*calibration, file);
  }

  parse_input(input, model.input, file);
  if (nodes.empty()) top.fail("'nodes' must list at least one node");
  if (nodes.size() > kMaxNodes) {
    top.fail("'nodes' lists " + std::to_string(nodes.size()) + " nodes, more than the limit of " +
             std::to_string(kMaxNodes));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    TensorRoles roles;
    model.nodes.push_back(parse_node(nodes[i], i, file, roles));
    graph.roles.push_back(std::move(roles));
  }
  return graph;
}

// Step 4: the path stays in the graph's folder (checked on the text: no absolute path, no '..'),
// then SHA-256, then the safetensors rules.
SafetensorsFile read_weights(const ParsedGraph& graph, const std::string& graph_path,
                             std::string& weights_path) {
  const std::filesystem::path relative(graph.weights_file);
  if (relative.is_absolute() || relative.has_root_name() || relative.has_root_directory()) {
    throw FormatError(graph_path, "weights.file \"" + graph.weights_file +
                                      "\" must be a path relative to the graph file's folder, "
                                      "not an absolute path");
  }
  for (const auto& part : relative) {
    if (part == "..") {
      throw FormatError(graph_path, "weights.file \"" + graph.weights_file +
                                        "\" must stay inside the graph file's folder (no '..')");
    }
  }
  weights_path = (std::filesystem::path(graph_path).parent_path() / relative).string();
  std::vector<uint8_t> bytes =
      read_file_bytes(weights_path, kMaxSafetensorsFileBytes, "weights file");
  const std::string digest = sha256_hex(bytes);
  if (digest != graph.weights_sha256) {
    throw FormatError(weights_path, "SHA-256 is " + digest + ", but " + graph_path +
                                        " expects " + graph.weights_sha256 +
                                        " (the weights file was changed or belongs to another "
                                        "model)");
  }
  return parse_safetensors(std::move(bytes), weights_path);
}

// The part of a tensor's shape that the node's own attributes fix; the input-dependent dimension
// (conv2d's input channels, dense's input size) is checked during shape propagation.
void check_tensor_against_attributes(const Node& node, const std::string& role,
                                     const SafetensorsTensor& tensor, const std::string& file) {
  const Shape& s = tensor.shape;
  const std::string label = node_label(node) + ": " + role + " tensor '" + tensor.name + "'";
  if (node.op == OpType::ScaleShift) {
    // One value per channel; the channel count comes from the input (checked with the shapes).
    if (s.size() != 1) {
      throw FormatError(file, label + " has shape " + shape_to_string(s) +
                                  ", expected [<input channels>] (one value per channel)");
    }
    return;
  }
  const bool conv = node.op == OpType::Conv2D;
  const int64_t out = conv ? node.out_channels : node.units;
  const std::string attrs = conv ? "out_channels " + std::to_string(out) + ", kernel " +
                                       std::to_string(node.window.kernel_h) + "×" +
                                       std::to_string(node.window.kernel_w)
                                 : "units " + std::to_string(out);
  std::string expected;
  bool ok = false;
  if (role == "bias") {
    ok = s == Shape{out};
    expected = "[" + std::to_string(out) + "]";
  } else if (conv) {
    ok = s.size() == 4 && s[0] == out && s[2] == node.window.kernel_h &&
         s[3] == node.window.kernel_w;
    expected = "[" + std::to_string(out) + ", <input channels>, " +
               std::to_string(node.window.kernel_h) + ", " + std::to_string(node.window.kernel_w) +
               "]";
  } else {
    ok = s.size() == 2 && s[0] == out;
    expected = "[" + std::to_string(out) + ", <input size>]";
  }
  if (!ok) {
    throw FormatError(file, label + " has shape " + shape_to_string(s) + ", expected " + expected +
                                " (" + attrs + ")");
  }
}

// Step 5.
void attach_tensors(ParsedGraph& graph, const std::vector<size_t>& order,
                    const SafetensorsFile& weights, const std::string& file) {
  std::map<std::string, std::string> used_by;  // tensor name -> "node 'c1' (weight)"
  for (size_t i = 0; i < graph.model.nodes.size(); ++i) {
    Node& node = graph.model.nodes[i];
    for (const auto& [role, name] : graph.roles[order[i]]) {
      const std::string user = node_label(node) + " (" + role + ")";
      const auto [previous, inserted] = used_by.emplace(name, user);
      if (!inserted) {
        throw FormatError(file, node_label(node) + ": " + role + " tensor '" + name +
                                    "' is already used by " + previous->second +
                                    "; each tensor belongs to exactly one node");
      }
      const SafetensorsTensor* tensor = weights.find(name);
      if (!tensor) {
        throw FormatError(file, node_label(node) + ": " + role + " tensor '" + name +
                                    "' is not in the weights file " + weights.path);
      }
      if (tensor->dtype != DType::F32) {
        throw FormatError(file, node_label(node) + ": " + role + " tensor '" + name +
                                    "' has dtype " + dtype_name(tensor->dtype) +
                                    ", expected F32");
      }
      check_tensor_against_attributes(node, role, *tensor, file);
      Tensor values{name, tensor->shape, weights.to_floats(*tensor)};
      // scale_shift's 'scale' lives in Node::weight and its 'shift' in Node::bias (model.hpp).
      (role == "weight" || role == "scale" ? node.weight : node.bias) = std::move(values);
    }
  }
  for (const SafetensorsTensor& tensor : weights.tensors) {
    if (!used_by.count(tensor.name)) {
      throw FormatError(weights.path, "tensor '" + tensor.name + "' is not used by any node of " +
                                          file + " (a weights file holds exactly the model's "
                                          "tensors)");
    }
  }
}

// Architecture only: each role's tensor gets its name now; its shape and zero values come with
// shape propagation (model_checks.cpp), once the input sizes are known.
void name_tensors(ParsedGraph& graph, const std::vector<size_t>& order, const std::string& file) {
  std::map<std::string, std::string> used_by;
  for (size_t i = 0; i < graph.model.nodes.size(); ++i) {
    Node& node = graph.model.nodes[i];
    for (const auto& [role, name] : graph.roles[order[i]]) {
      const std::string user = node_label(node) + " (" + role + ")";
      const auto [previous, inserted] = used_by.emplace(name, user);
      if (!inserted) {
        throw FormatError(file, node_label(node) + ": " + role + " tensor '" + name +
                                    "' is already used by " + previous->second +
                                    "; each tensor belongs to exactly one node");
      }
      (role == "weight" || role == "scale" ? node.weight : node.bias) = Tensor{name, {}, {}};
    }
  }
}

}  // namespace

Model load_model(const std::string& graph_path) {
  const std::vector<uint8_t> bytes = read_file_bytes(graph_path, kMaxGraphFileBytes, "graph file");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  ParsedGraph graph = parse_graph(parse_strict_json(text, graph_path, "graph file"), graph_path);
  const std::vector<size_t> order = check_names_and_sort(graph.model, graph_path);
  check_calibration_names(graph.model, graph_path);
  if (graph.model.has_weights) {
    std::string weights_path;
    const SafetensorsFile weights = read_weights(graph, graph_path, weights_path);
    graph.model.weights_path = weights_path;
    attach_tensors(graph, order, weights, graph_path);
  } else {
    name_tensors(graph, order, graph_path);
  }
  if (graph.labels_present && graph.model.labels.empty()) {
    throw FormatError(graph_path, "'labels' is empty; remove it or give one name per class");
  }
  propagate_shapes(graph.model, graph_path);
  return std::move(graph.model);
}

void validate_model(Model& model, const std::string& origin) {
  check_input(model.input, origin);
  for (const Node& node : model.nodes) check_node_attributes(node, origin);
  check_names_and_sort(model, origin);
  propagate_shapes(model, origin);
}

}  // namespace formats

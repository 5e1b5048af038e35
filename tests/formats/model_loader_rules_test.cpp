// One test per rule of model-format-v1.md ("What a loader checks"): each writes a real file
// breaking exactly that rule and checks load_model's FormatError names the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>

#include "formats/model_loader.hpp"
#include "formats/sha256.hpp"
#include "test_files.hpp"

namespace {

using formats_test::Bytes;
using formats_test::Json;
using formats_test::TinyModel;

class LoaderRuleTest : public formats_test::TempDirTest {
 protected:
  // Writes `tiny`, loads it, expects an error about the graph file.
  void expect_graph_error(TinyModel& tiny, const std::vector<std::string>& parts) {
    const std::string graph = tiny.write(dir_);
    formats_test::expect_format_error([&] { formats::load_model(graph); }, graph, parts);
  }
  void expect_weights_error(TinyModel& tiny, const std::vector<std::string>& parts) {
    const std::string graph = tiny.write(dir_);
    formats_test::expect_format_error([&] { formats::load_model(graph); },
                                      path("tiny.safetensors"), parts);
  }
  // A graph file with exactly these bytes.
  void expect_text_error(const std::string& text, const std::vector<std::string>& parts) {
    const std::string graph = path("model.json");
    formats_test::write_text(graph, text);
    formats_test::expect_format_error([&] { formats::load_model(graph); }, graph, parts);
  }
};

// ---- Step 1: the file, UTF-8 JSON, keys and types ----

TEST_F(LoaderRuleTest, MissingGraphFile) {
  EXPECT_FORMAT_ERROR(formats::load_model(path("absent.json")), path("absent.json"),
                      "graph file not found");
}

TEST_F(LoaderRuleTest, GraphPathIsADirectory) {
  std::filesystem::create_directories(dir_ / "folder.json");
  EXPECT_FORMAT_ERROR(formats::load_model(path("folder.json")), path("folder.json"),
                      "is a directory");
}

TEST_F(LoaderRuleTest, GraphFileOver16MiB) {
  TinyModel tiny;
  std::string text = tiny.graph.dump();
  text.append((size_t{16} << 20) + 1 - text.size(), ' ');  // valid JSON, one byte too long
  expect_text_error(text, {"graph file is 16777217 bytes", "limit of 16 MiB"});
}

TEST_F(LoaderRuleTest, GraphFileExactly16MiBIsAccepted) {
  TinyModel tiny;
  const std::string graph = tiny.write(dir_);
  std::string text = tiny.graph.dump();
  text.append((size_t{16} << 20) - text.size(), ' ');
  formats_test::write_text(graph, text);
  EXPECT_NO_THROW(formats::load_model(graph));
}

TEST_F(LoaderRuleTest, InvalidUtf8) {
  TinyModel tiny;
  tiny.graph["description"] = "caf\xC3\xA9";
  std::string text = tiny.graph.dump();
  text[text.find("\xC3")] = '\xFF';
  expect_text_error(text, {"graph file is not valid UTF-8", "0xFF"});
}

TEST_F(LoaderRuleTest, OverlongUtf8IsInvalid) {
  expect_text_error("{\"name\": \"\xC0\xAF\"}", {"not valid UTF-8"});
}

TEST_F(LoaderRuleTest, SyntaxError) {
  expect_text_error("{\"format\": \"cnn-engine-model\",\n \"version\": 1,,}",
                    {"graph file is not valid JSON", "line 2"});
}

TEST_F(LoaderRuleTest, EmptyFile) { expect_text_error("", {"not valid JSON"}); }

TEST_F(LoaderRuleTest, DuplicateKey) {
  expect_text_error(R"({"format": "cnn-engine-model", "version": 1, "version": 2})",
                    {"has the key 'version' twice"});
}

TEST_F(LoaderRuleTest, DuplicateKeyInsideANode) {
  TinyModel tiny;
  std::string text = tiny.graph.dump();
  const std::string from = R"("units":3)";
  text.replace(text.find(from), from.size(), R"("units":3,"units":4)");
  expect_text_error(text, {"'units' twice", "inside 'attrs'"});
}

TEST_F(LoaderRuleTest, NestingTooDeep) {
  expect_text_error(std::string(100, '[') + std::string(100, ']'), {"nests", "64 levels"});
}

TEST_F(LoaderRuleTest, RootNotAnObject) { expect_text_error("[1, 2]", {"must hold a JSON object, got array"}); }

TEST_F(LoaderRuleTest, UnknownTopLevelKey) {
  TinyModel tiny;
  tiny.graph["nodez"] = Json::array();
  expect_graph_error(tiny, {"unknown key 'nodez'", "expected: format, version"});
}

// "weights" is optional since the architecture-only amendment (architecture_only_test.cpp).
TEST_F(LoaderRuleTest, MissingRequiredTopLevelKeys) {
  for (const char* key : {"name", "input", "nodes", "outputs"}) {
    SCOPED_TRACE(key);
    TinyModel tiny;
    tiny.graph.erase(key);
    expect_graph_error(tiny, {std::string("missing required key '") + key + "'"});
  }
}

TEST_F(LoaderRuleTest, WrongTopLevelTypes) {
  const std::pair<const char*, Json> cases[] = {
      {"name", 5},           {"description", Json::array()}, {"weights", "w.safetensors"},
      {"input", Json::array()}, {"labels", "abc"},           {"nodes", Json::object()},
      {"outputs", "prob"}};
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key);
    TinyModel tiny;
    tiny.graph[key] = value;
    expect_graph_error(tiny, {std::string("'") + key + "' must be"});
  }
}

TEST_F(LoaderRuleTest, LabelsMustBeStrings) {
  TinyModel tiny;
  tiny.graph["labels"] = Json::array({"a", 1, "c"});
  expect_graph_error(tiny, {"'labels' must be an array of strings"});
}

// ---- Step 2: format, version, input, nodes ----

TEST_F(LoaderRuleTest, WrongFormat) {
  TinyModel tiny;
  tiny.graph["format"] = "onnx";
  expect_graph_error(tiny, {"'format' must be \"cnn-engine-model\", got \"onnx\""});
}

TEST_F(LoaderRuleTest, MissingFormat) {
  TinyModel tiny;
  tiny.graph.erase("format");
  expect_graph_error(tiny, {"missing required key 'format'"});
}

TEST_F(LoaderRuleTest, UnsupportedVersion) {
  TinyModel tiny;
  tiny.graph["version"] = 2;
  tiny.graph["new_v2_key"] = true;  // a newer file is reported by version, not by its new keys
  expect_graph_error(tiny, {"unsupported version 2"});
}

TEST_F(LoaderRuleTest, VersionNotAnInteger) {
  for (const Json& version : {Json("1"), Json(1.5), Json(nullptr)}) {
    TinyModel tiny;
    tiny.graph["version"] = version;
    expect_graph_error(tiny, {"'version' must be an integer"});
  }
}

TEST_F(LoaderRuleTest, EmptyName) {
  TinyModel tiny;
  tiny.graph["name"] = "";
  expect_graph_error(tiny, {"'name' must not be empty"});
}

TEST_F(LoaderRuleTest, WeightsObjectKeys) {
  TinyModel tiny;
  tiny.graph["weights"]["sha1"] = "x";
  expect_graph_error(tiny, {"weights: unknown key 'sha1'"});
  TinyModel missing;
  missing.graph["weights"].erase("file");
  expect_graph_error(missing, {"weights: missing required key 'file'"});
  TinyModel empty;
  empty.graph["weights"]["file"] = "";
  empty.fix_sha256 = false;
  empty.graph["weights"]["sha256"] = std::string(64, 'a');
  expect_graph_error(empty, {"weights: 'file' must not be empty"});
}

TEST_F(LoaderRuleTest, Sha256MustBe64LowercaseHexDigits) {
  for (const std::string& digest :
       {std::string(64, 'A'), std::string(63, 'a'), std::string(65, 'a'), std::string(64, 'g')}) {
    TinyModel tiny;
    tiny.fix_sha256 = false;
    tiny.graph["weights"]["sha256"] = digest;
    expect_graph_error(tiny, {"'sha256' must be 64 lowercase hex digits"});
  }
}

TEST_F(LoaderRuleTest, InputKeysAndTypes) {
  TinyModel unknown;
  unknown.graph["input"]["layout"] = "NCHW";
  expect_graph_error(unknown, {"input: unknown key 'layout'"});
  TinyModel missing;
  missing.graph["input"].erase("shape");
  expect_graph_error(missing, {"input: missing required key 'shape'"});
  TinyModel dtype;
  dtype.graph["input"]["dtype"] = "int8";
  expect_graph_error(dtype, {"input: dtype must be \"uint8\" or \"float32\", got \"int8\""});
  TinyModel shape;
  shape.graph["input"]["shape"] = Json::array({1, 8.5, 8});
  expect_graph_error(shape, {"input: 'shape' must be an array of integers"});
}

TEST_F(LoaderRuleTest, Uint8InputNeedsRank3) {
  TinyModel tiny;
  tiny.graph["input"]["shape"] = Json::array({8, 8});
  expect_graph_error(tiny, {"input: a uint8 input has shape [C, H, W], got [8, 8]"});
}

TEST_F(LoaderRuleTest, Float32InputRank1To3) {
  for (const Json& shape : {Json::array(), Json::array({1, 1, 1, 1})}) {
    TinyModel tiny;
    tiny.graph["input"] = {{"name", "image"}, {"dtype", "float32"}, {"shape", shape}};
    expect_graph_error(tiny, {"a float32 input has rank 1 to 3"});
  }
}

TEST_F(LoaderRuleTest, InputDimensionsPositive) {
  TinyModel tiny;
  tiny.graph["input"]["shape"] = Json::array({1, 0, 8});
  expect_graph_error(tiny, {"input: shape [1, 0, 8] has a dimension below 1"});
}

TEST_F(LoaderRuleTest, InputOver2Pow31Elements) {
  TinyModel tiny;
  tiny.graph["input"]["shape"] = Json::array({1, 65536, 32768});
  expect_graph_error(tiny, {"input: shape [1, 65536, 32768] has more than 2147483647 elements"});
  TinyModel overflow;
  overflow.graph["input"]["shape"] = Json::array({INT64_MAX, INT64_MAX, 2});
  expect_graph_error(overflow, {"has more than 2147483647 elements"});
}

TEST_F(LoaderRuleTest, PaddedInputOver2Pow31Elements) {
  TinyModel tiny;
  tiny.graph["input"]["shape"] = Json::array({1, 46340, 46340});  // just under 2^31
  tiny.graph["input"]["preprocess"]["pad"] = Json::array({1, 1, 1, 1});
  expect_graph_error(tiny, {"input: padded shape [1, 46342, 46342] has more than 2147483647"});
}

TEST_F(LoaderRuleTest, Uint8InputNeedsPreprocess) {
  TinyModel tiny;
  tiny.graph["input"].erase("preprocess");
  expect_graph_error(tiny, {"a uint8 input needs 'preprocess'"});
}

TEST_F(LoaderRuleTest, Float32InputMustNotHavePreprocess) {
  TinyModel tiny;
  tiny.graph["input"]["dtype"] = "float32";
  expect_graph_error(tiny, {"a float32 input is already preprocessed"});
}

TEST_F(LoaderRuleTest, PreprocessKeys) {
  TinyModel unknown;
  unknown.graph["input"]["preprocess"]["offset"] = 1;
  expect_graph_error(unknown, {"input.preprocess: unknown key 'offset'"});
  for (const char* key : {"scale", "mean", "std"}) {
    TinyModel missing;
    missing.graph["input"]["preprocess"].erase(key);
    expect_graph_error(missing, {std::string("input.preprocess: missing required key '") + key + "'"});
  }
  TinyModel pad;
  pad.graph["input"]["preprocess"]["pad"] = Json::array({1, 1});
  expect_graph_error(pad, {"'pad' must be an array of 4 integers [top, bottom, left, right]"});
  TinyModel type;
  type.graph["input"]["preprocess"]["scale"] = "1/255";
  expect_graph_error(type, {"input.preprocess: 'scale' must be a number"});
}

TEST_F(LoaderRuleTest, PreprocessValues) {
  const std::pair<std::function<void(Json&)>, std::string> cases[] = {
      {[](Json& p) { p["scale"] = 0; }, "scale must be a positive finite number"},
      {[](Json& p) { p["scale"] = -1.0; }, "scale must be a positive finite number"},
      {[](Json& p) { p["scale"] = 1e300; }, "scale must be a positive finite number"},
      {[](Json& p) { p["mean"] = Json::array({0.1, 0.2}); }, "mean and std need one entry per channel (1), got 2 and 1"},
      {[](Json& p) { p["std"] = Json::array(); }, "mean and std need one entry per channel (1), got 1 and 0"},
      {[](Json& p) { p["std"] = Json::array({0.0}); }, "std[0] must be a positive finite number"},
      {[](Json& p) { p["std"] = Json::array({-1.0}); }, "std[0] must be a positive finite number"},
      {[](Json& p) { p["mean"] = Json::array({1e39}); }, "mean[0] is not a finite number"},
      {[](Json& p) { p["pad"] = Json::array({0, -1, 0, 0}); }, "pad entries must be 0 or more"},
      {[](Json& p) { p["pad_value"] = -1e39; }, "pad_value must be a finite number"},
  };
  for (const auto& [corrupt, message] : cases) {
    SCOPED_TRACE(message);
    TinyModel tiny;
    corrupt(tiny.graph["input"]["preprocess"]);
    expect_graph_error(tiny, {"input.preprocess: " + message});
  }
}

TEST_F(LoaderRuleTest, EmptyInputName) {
  TinyModel tiny;
  tiny.graph["input"]["name"] = "";
  expect_graph_error(tiny, {"input: name must not be empty"});
}

TEST_F(LoaderRuleTest, NodesMustNotBeEmpty) {
  TinyModel tiny;
  tiny.graph["nodes"] = Json::array();
  tiny.tensors.clear();
  expect_graph_error(tiny, {"'nodes' must list at least one node"});
}

TEST_F(LoaderRuleTest, AtMost4096Nodes) {
  TinyModel tiny;
  tiny.graph["input"] = Json::parse(R"({"name": "x", "dtype": "float32", "shape": [4]})");
  tiny.graph.erase("labels");
  tiny.tensors.clear();
  Json nodes = Json::array();
  for (int i = 0; i < 4097; ++i) {
    nodes.push_back({{"name", "n" + std::to_string(i)}, {"op", "relu"},
                     {"inputs", {i == 0 ? std::string("x") : "n" + std::to_string(i - 1)}}});
  }
  tiny.graph["outputs"] = Json::array({"n4095"});
  tiny.graph["nodes"] = nodes;
  expect_graph_error(tiny, {"'nodes' lists 4097 nodes, more than the limit of 4096"});
  nodes.erase(nodes.size() - 1);
  tiny.graph["nodes"] = nodes;
  const formats::Model model = formats::load_model(tiny.write(dir_));
  EXPECT_EQ(model.nodes.size(), 4096u);
}

TEST_F(LoaderRuleTest, NodeNotAnObject) {
  TinyModel tiny;
  tiny.graph["nodes"][1] = "relu";
  expect_graph_error(tiny, {"nodes[1] must be an object, got string"});
}

TEST_F(LoaderRuleTest, NodeNameMissingOrEmpty) {
  TinyModel missing;
  missing.graph["nodes"][1].erase("name");
  expect_graph_error(missing, {"nodes[1]: missing required key 'name'"});
  TinyModel empty;
  empty.graph["nodes"][1]["name"] = "";
  expect_graph_error(empty, {"nodes[1]: 'name' must not be empty"});
}

TEST_F(LoaderRuleTest, UnknownNodeKey) {
  TinyModel tiny;
  tiny.node("r1")["input"] = Json::array({"c1"});
  expect_graph_error(tiny, {"node 'r1': unknown key 'input' (expected: name, op, inputs, attrs, tensors)"});
}

TEST_F(LoaderRuleTest, MisspeltKeyIsReportedAsUnknownNotAsMissing) {
  TinyModel attrs;
  attrs.node("c1")["atrs"] = attrs.node("c1")["attrs"];
  attrs.node("c1").erase("attrs");
  expect_graph_error(attrs, {"node 'c1': unknown key 'atrs'"});
  TinyModel name;
  name.graph["nodes"][1]["nmae"] = "r1";
  name.graph["nodes"][1].erase("name");
  expect_graph_error(name, {"nodes[1]: unknown key 'nmae'"});
  TinyModel top;
  top.graph["output"] = top.graph["outputs"];
  top.graph.erase("outputs");
  expect_graph_error(top, {"unknown key 'output'"});
  TinyModel kernel;
  kernel.node("p1")["attrs"] = {{"kernal", {2, 2}}};
  expect_graph_error(kernel, {"node 'p1': attrs: unknown attribute 'kernal' (expected: kernel, stride, padding)"});
}

TEST_F(LoaderRuleTest, UnknownOp) {
  TinyModel tiny;
  tiny.node("r1")["op"] = "gelu";
  expect_graph_error(tiny, {"node 'r1': unknown op 'gelu'", "expected one of: conv2d"});
}

TEST_F(LoaderRuleTest, NodeInputsMustBeStrings) {
  TinyModel tiny;
  tiny.node("r1")["inputs"] = "c1";
  expect_graph_error(tiny, {"node 'r1': 'inputs' must be an array of strings"});
}

TEST_F(LoaderRuleTest, WrongNumberOfInputs) {
  TinyModel relu;
  relu.node("r1")["inputs"] = Json::array({"c1", "c1"});
  expect_graph_error(relu, {"node 'r1': relu takes 1 input, got 2"});
  TinyModel add;
  add.node("r1")["op"] = "add";
  expect_graph_error(add, {"node 'r1': add takes 2 inputs, got 1"});
  TinyModel none;
  none.node("prob")["inputs"] = Json::array();
  expect_graph_error(none, {"node 'prob': softmax takes 1 input, got 0"});
}

TEST_F(LoaderRuleTest, AttrsMustBeAnObject) {
  TinyModel tiny;
  tiny.node("c1")["attrs"] = Json::array({3, 3});
  expect_graph_error(tiny, {"node 'c1': 'attrs' must be an object"});
}

TEST_F(LoaderRuleTest, UnknownAttribute) {
  TinyModel conv;
  conv.node("c1")["attrs"]["dilation"] = Json::array({1, 1});
  expect_graph_error(conv, {"node 'c1': attrs: unknown attribute 'dilation'",
                            "out_channels, kernel, stride, padding"});
  TinyModel relu;
  relu.node("r1")["attrs"] = {{"alpha", 0.1}};
  expect_graph_error(relu, {"node 'r1': attrs: unknown attribute 'alpha'", "relu takes no attributes"});
  TinyModel maxpool;
  maxpool.node("p1")["attrs"]["count_include_pad"] = true;
  expect_graph_error(maxpool, {"node 'p1': attrs: unknown attribute 'count_include_pad'"});
}

TEST_F(LoaderRuleTest, MissingRequiredAttributes) {
  TinyModel kernel;
  kernel.node("c1")["attrs"].erase("kernel");
  expect_graph_error(kernel, {"node 'c1': attrs: missing required key 'kernel'"});
  TinyModel channels;
  channels.node("c1")["attrs"].erase("out_channels");
  expect_graph_error(channels, {"node 'c1': attrs: missing required key 'out_channels'"});
  TinyModel units;
  units.node("d1").erase("attrs");
  expect_graph_error(units, {"node 'd1': attrs: missing required key 'units'"});
  TinyModel count_include_pad;
  count_include_pad.node("p1")["op"] = "avgpool";
  expect_graph_error(count_include_pad, {"node 'p1': attrs: missing required key 'count_include_pad'"});
}

TEST_F(LoaderRuleTest, AttributeTypes) {
  TinyModel kernel;
  kernel.node("c1")["attrs"]["kernel"] = 3;
  expect_graph_error(kernel, {"node 'c1': attrs: 'kernel' must be an array of 2 integers [kh, kw], got 3"});
  TinyModel kernel3;
  kernel3.node("c1")["attrs"]["kernel"] = Json::array({3, 3, 3});
  expect_graph_error(kernel3, {"'kernel' must be an array of 2 integers"});
  TinyModel padding;
  padding.node("c1")["attrs"]["padding"] = Json::array({1, 1});
  expect_graph_error(padding, {"'padding' must be an array of 4 integers [top, bottom, left, right]"});
  TinyModel boolean;
  boolean.node("p1") = Json::parse(R"({"name": "p1", "op": "avgpool", "inputs": ["r1"],
      "attrs": {"kernel": [2, 2], "count_include_pad": 1}})");
  expect_graph_error(boolean, {"'count_include_pad' must be true or false, got 1"});
  TinyModel units;
  units.node("d1")["attrs"]["units"] = 3.0;
  expect_graph_error(units, {"node 'd1': attrs: 'units' must be an integer, got 3.0"});
  TinyModel huge;
  huge.node("d1")["attrs"]["units"] = 4294967296LL;
  expect_graph_error(huge, {"'units' value 4294967296 is out of range"});
}

TEST_F(LoaderRuleTest, AttributeRanges) {
  const std::pair<std::function<void(Json&)>, std::string> cases[] = {
      {[](Json& a) { a["kernel"] = Json::array({0, 3}); }, "kernel must be at least 1 in each dimension, got 0×3"},
      {[](Json& a) { a["stride"] = Json::array({1, 0}); }, "stride must be at least 1 in each dimension, got 1×0"},
      {[](Json& a) { a["padding"] = Json::array({0, -1, 0, 0}); }, "padding bottom is -1; padding must be 0 or more"},
      {[](Json& a) { a["padding"] = Json::array({0, 0, 3, 0}); }, "padding left is 3, but must be smaller than the kernel (3×3)"},
      {[](Json& a) { a["out_channels"] = 0; }, "out_channels must be at least 1, got 0"},
  };
  for (const auto& [corrupt, message] : cases) {
    SCOPED_TRACE(message);
    TinyModel tiny;
    corrupt(tiny.node("c1")["attrs"]);
    expect_graph_error(tiny, {"node 'c1': " + message});
  }
  TinyModel units;
  units.node("d1")["attrs"]["units"] = -3;
  expect_graph_error(units, {"node 'd1': units must be at least 1, got -3"});
  TinyModel pool;
  pool.node("p1")["attrs"]["padding"] = Json::array({2, 0, 0, 0});
  expect_graph_error(pool, {"node 'p1': padding top is 2, but must be smaller than the kernel (2×2)"});
}

TEST_F(LoaderRuleTest, TensorRoles) {
  TinyModel unknown;
  unknown.node("c1")["tensors"]["scale"] = "c1.scale";
  expect_graph_error(unknown, {"node 'c1': tensors: unknown tensor role 'scale' (expected: weight, bias)"});
  TinyModel missing;
  missing.node("d1")["tensors"].erase("weight");
  expect_graph_error(missing, {"node 'd1': tensors: dense needs a 'weight' tensor"});
  TinyModel absent;
  absent.node("c1").erase("tensors");
  expect_graph_error(absent, {"node 'c1': tensors: conv2d needs a 'weight' tensor"});
  TinyModel relu;
  relu.node("r1")["tensors"] = {{"weight", "c1.weight"}};
  expect_graph_error(relu, {"node 'r1': tensors: unknown tensor role 'weight'", "relu has no tensors"});
  TinyModel type;
  type.node("c1")["tensors"]["bias"] = 7;
  expect_graph_error(type, {"node 'c1': tensors: 'bias' must be a string"});
  TinyModel not_object;
  not_object.node("c1")["tensors"] = Json::array({"c1.weight"});
  expect_graph_error(not_object, {"node 'c1': 'tensors' must be an object"});
}

// ---- Step 3: names and the DAG ----

TEST_F(LoaderRuleTest, DuplicateNodeNames) {
  TinyModel tiny;
  tiny.node("f1")["name"] = "r1";
  expect_graph_error(tiny, {"two nodes are named 'r1'"});
}

TEST_F(LoaderRuleTest, NodeNamedLikeTheInput) {
  TinyModel tiny;
  tiny.node("r1")["name"] = "image";
  expect_graph_error(tiny, {"node 'image' has the same name as the model input"});
}

TEST_F(LoaderRuleTest, UnknownNodeInput) {
  TinyModel tiny;
  tiny.node("r1")["inputs"] = Json::array({"conv1"});
  expect_graph_error(tiny, {"node 'r1': input 'conv1' is neither the model input nor the name of a node"});
}

TEST_F(LoaderRuleTest, Outputs) {
  TinyModel empty;
  empty.graph["outputs"] = Json::array();
  expect_graph_error(empty, {"outputs must list at least one value"});
  TinyModel twice;
  twice.graph["outputs"] = Json::array({"prob", "prob"});
  expect_graph_error(twice, {"output 'prob' is listed twice"});
  TinyModel unknown;
  unknown.graph["outputs"] = Json::array({"probs"});
  expect_graph_error(unknown, {"output 'probs' is not the name of a node"});
  TinyModel input;
  input.graph["outputs"] = Json::array({"prob", "image"});
  expect_graph_error(input, {"output 'image' is the model input"});
}

TEST_F(LoaderRuleTest, Cycle) {
  TinyModel tiny;
  tiny.node("r1")["inputs"] = Json::array({"f1"});  // c1 → r1 → p1 → f1 → r1
  expect_graph_error(tiny, {"the graph has a cycle: 'r1' -> 'p1' -> 'f1' -> 'r1'"});
}

TEST_F(LoaderRuleTest, SelfLoop) {
  TinyModel tiny;
  tiny.node("r1")["inputs"] = Json::array({"r1"});
  expect_graph_error(tiny, {"the graph has a cycle: 'r1' -> 'r1'"});
}

// ---- Step 4: the weights file ----

TEST_F(LoaderRuleTest, AbsoluteWeightsPath) {
  TinyModel tiny;
  tiny.graph["weights"]["file"] = path("tiny.safetensors");
  tiny.fix_sha256 = false;
  tiny.graph["weights"]["sha256"] = std::string(64, '0');
  expect_graph_error(tiny, {"must be a path relative to the graph file's folder, not an absolute path"});
}

TEST_F(LoaderRuleTest, WeightsPathEscapingTheFolder) {
  for (const char* file : {"../tiny.safetensors", "sub/../../tiny.safetensors", "..", "a/.."}) {
    SCOPED_TRACE(file);
    TinyModel tiny;
    tiny.graph["weights"]["file"] = file;
    tiny.fix_sha256 = false;
    tiny.graph["weights"]["sha256"] = std::string(64, '0');
    expect_graph_error(tiny, {"must stay inside the graph file's folder (no '..')"});
  }
}

TEST_F(LoaderRuleTest, MissingWeightsFile) {
  TinyModel tiny;
  tiny.graph["weights"]["file"] = "other.safetensors";
  const std::string graph = tiny.write(dir_);
  EXPECT_FORMAT_ERROR(formats::load_model(graph), path("other.safetensors"), "weights file not found");
}

TEST_F(LoaderRuleTest, WeightsPathIsADirectory) {
  TinyModel tiny;
  std::filesystem::create_directories(dir_ / "w");
  tiny.graph["weights"]["file"] = "w";
  const std::string graph = tiny.write(dir_);
  EXPECT_FORMAT_ERROR(formats::load_model(graph), path("w"), "weights file is a directory");
}

TEST_F(LoaderRuleTest, Sha256Mismatch) {
  TinyModel tiny;
  const std::string graph = tiny.write(dir_);
  Bytes weights = formats_test::read_bytes(path("tiny.safetensors"));
  weights.back() ^= 1;  // one bit of one weight
  formats_test::write_bytes(path("tiny.safetensors"), weights);
  EXPECT_FORMAT_ERROR(formats::load_model(graph), path("tiny.safetensors"), "SHA-256 is",
                      "but " + graph + " expects " + tiny.graph["weights"]["sha256"].get<std::string>());
}

TEST_F(LoaderRuleTest, WeightsBreakingASafetensorsRule) {
  // The digest matches, so the safetensors rules are what reject it.
  TinyModel tiny;
  const std::string graph = tiny.write(dir_);
  Bytes weights = formats_test::read_bytes(path("tiny.safetensors"));
  weights.resize(weights.size() - 4);
  formats_test::write_bytes(path("tiny.safetensors"), weights);
  tiny.graph["weights"]["sha256"] = formats::sha256_hex(weights);
  formats_test::write_text(graph, tiny.graph.dump());
  EXPECT_FORMAT_ERROR(formats::load_model(graph), path("tiny.safetensors"),
                      "tensor 'd1.bias' ends at byte 692 of the data buffer, past its end (688 bytes");
}

TEST_F(LoaderRuleTest, WeightsNotSafetensorsAtAll) {
  TinyModel tiny;
  const std::string graph = tiny.write(dir_);
  formats_test::write_text(path("tiny.safetensors"), "PK\x03\x04 this is a zip file, not safetensors");
  tiny.graph["weights"]["sha256"] = formats::sha256_hex(formats_test::read_bytes(path("tiny.safetensors")));
  formats_test::write_text(graph, tiny.graph.dump());
  EXPECT_FORMAT_ERROR(formats::load_model(graph), path("tiny.safetensors"), "safetensors header length");
}

// ---- Step 5: tensors ----

TEST_F(LoaderRuleTest, NamedTensorMissingFromWeights) {
  TinyModel tiny;
  tiny.node("c1")["tensors"]["bias"] = "c1.b";
  expect_graph_error(tiny, {"node 'c1': bias tensor 'c1.b' is not in the weights file",
                            path("tiny.safetensors")});
}

TEST_F(LoaderRuleTest, TensorNotF32) {
  TinyModel tiny;
  tiny.tensor("c1.bias") = formats::TensorToWrite{"c1.bias", formats::DType::F64, {2}, Bytes(16, 0)};
  expect_graph_error(tiny, {"node 'c1': bias tensor 'c1.bias' has dtype F64, expected F32"});
}

TEST_F(LoaderRuleTest, UnusedTensor) {
  TinyModel tiny;
  tiny.tensors.push_back(formats::f32_tensor("c2.weight", {1}, {1.0f}));
  expect_weights_error(tiny, {"tensor 'c2.weight' is not used by any node of", "tiny.json"});
}

TEST_F(LoaderRuleTest, UnusedTensorOfAnotherDtype) {
  TinyModel tiny;
  tiny.tensors.push_back(formats::TensorToWrite{"step", formats::DType::I64, {}, Bytes(8, 0)});
  expect_weights_error(tiny, {"tensor 'step' is not used by any node"});
}

TEST_F(LoaderRuleTest, TensorUsedByTwoRoles) {
  TinyModel tiny;
  tiny.node("d1")["tensors"]["bias"] = "c1.bias";
  tiny.tensor("c1.bias") = formats::f32_tensor("c1.bias", {2}, {1, 2});
  expect_graph_error(tiny, {"node 'd1': bias tensor 'c1.bias' is already used by node 'c1' (bias)"});
}

TEST_F(LoaderRuleTest, ConvWeightShapeAgainstAttributes) {
  TinyModel tiny;
  tiny.tensor("c1.weight") = formats::f32_tensor("c1.weight", {2, 1, 5, 5}, formats_test::ramp(50));
  expect_graph_error(tiny, {"node 'c1': weight tensor 'c1.weight' has shape [2, 1, 5, 5], expected "
                            "[2, <input channels>, 3, 3] (out_channels 2, kernel 3×3)"});
}

TEST_F(LoaderRuleTest, ConvWeightRank) {
  TinyModel tiny;
  tiny.tensor("c1.weight") = formats::f32_tensor("c1.weight", {2, 9}, formats_test::ramp(18));
  expect_graph_error(tiny, {"node 'c1': weight tensor 'c1.weight' has shape [2, 9], expected"});
}

TEST_F(LoaderRuleTest, BiasShape) {
  TinyModel conv;
  conv.tensor("c1.bias") = formats::f32_tensor("c1.bias", {3}, {1, 2, 3});
  expect_graph_error(conv, {"node 'c1': bias tensor 'c1.bias' has shape [3], expected [2]"});
  TinyModel dense;
  dense.tensor("d1.bias") = formats::f32_tensor("d1.bias", {1, 3}, {1, 2, 3});
  expect_graph_error(dense, {"node 'd1': bias tensor 'd1.bias' has shape [1, 3], expected [3] (units 3)"});
}

TEST_F(LoaderRuleTest, DenseWeightShapeAgainstUnits) {
  TinyModel tiny;
  tiny.tensor("d1.weight") = formats::f32_tensor("d1.weight", {50, 3}, formats_test::ramp(150));
  expect_graph_error(tiny, {"node 'd1': weight tensor 'd1.weight' has shape [50, 3], expected [3, <input size>]"});
}

// ---- Step 6: shape propagation ----

TEST_F(LoaderRuleTest, ConvWeightInputChannels) {
  TinyModel tiny;
  tiny.tensor("c1.weight") = formats::f32_tensor("c1.weight", {2, 2, 3, 3}, formats_test::ramp(36));
  expect_graph_error(tiny, {"node 'c1': weight tensor 'c1.weight' has shape [2, 2, 3, 3], expected "
                            "[2, 1, 3, 3]", "input 'image' has 1 channel,"});
}

TEST_F(LoaderRuleTest, DenseWeightInputSize) {
  TinyModel tiny;
  tiny.tensor("d1.weight") = formats::f32_tensor("d1.weight", {3, 49}, formats_test::ramp(147));
  expect_graph_error(tiny, {"node 'd1': weight tensor 'd1.weight' has shape [3, 49], expected [3, 50]",
                            "input 'f1' has 50 elements"});
}

TEST_F(LoaderRuleTest, DenseNeedsRank1) {
  TinyModel tiny;
  tiny.node("d1")["inputs"] = Json::array({"p1"});
  expect_graph_error(tiny, {"node 'd1': dense needs a rank-1 input [K], but input 'p1' has shape "
                            "[2, 5, 5] (add a flatten node before it)"});
}

TEST_F(LoaderRuleTest, SoftmaxNeedsRank1) {
  TinyModel tiny;
  tiny.node("prob")["inputs"] = Json::array({"r1"});
  tiny.graph["labels"] = Json::array();
  tiny.graph.erase("labels");
  expect_graph_error(tiny, {"node 'prob': softmax needs a rank-1 input"});
}

TEST_F(LoaderRuleTest, ConvNeedsRank3) {
  TinyModel tiny;
  tiny.graph["input"] = Json::parse(R"({"name": "image", "dtype": "float32", "shape": [8, 8]})");
  expect_graph_error(tiny, {"node 'c1': conv2d needs a rank-3 input [C, H, W], but input 'image' has shape [8, 8]"});
}

TEST_F(LoaderRuleTest, PoolNeedsRank3) {
  TinyModel flat;
  flat.node("p1")["inputs"] = Json::array({"d1"});
  flat.node("f1")["inputs"] = Json::array({"r1"});
  flat.node("d1")["inputs"] = Json::array({"f1"});
  flat.node("prob")["inputs"] = Json::array({"p1"});
  flat.tensor("d1.weight") = formats::f32_tensor("d1.weight", {3, 200}, formats_test::ramp(600));
  expect_graph_error(flat, {"node 'p1': maxpool needs a rank-3 input [C, H, W], but input 'd1' has shape [3]"});
}

TEST_F(LoaderRuleTest, AddOfUnequalShapes) {
  TinyModel tiny;
  tiny.node("prob") = Json::parse(R"({"name": "prob", "op": "add", "inputs": ["d1", "f1"]})");
  expect_graph_error(tiny, {"node 'prob': add needs inputs of equal shape, but 'd1' is [3] and 'f1' is [50]"});
}

// ---- scale_shift and concat ----

// TinyModel with bn = scale_shift(p1) between the pool and the flatten (p1 is [2, 5, 5]).
TinyModel with_scale_shift() {
  TinyModel tiny;
  Json& nodes = tiny.graph["nodes"];
  nodes.insert(nodes.begin() + 3, Json::parse(R"({"name": "bn", "op": "scale_shift", "inputs": ["p1"],
                                                  "tensors": {"scale": "bn.scale", "shift": "bn.shift"}})"));
  tiny.node("f1")["inputs"] = Json::array({"bn"});
  tiny.tensors.push_back(formats::f32_tensor("bn.scale", {2}, {0.5f, -2.0f}));
  tiny.tensors.push_back(formats::f32_tensor("bn.shift", {2}, {1.0f, 0.25f}));
  return tiny;
}

// TinyModel with cat = concat(p1, r1p) between the pool and the flatten, r1p a second pool of r1:
// [2, 5, 5] + [2, 5, 5] -> [4, 5, 5], so d1 reads 100 features.
TinyModel with_concat() {
  TinyModel tiny;
  Json& nodes = tiny.graph["nodes"];
  nodes.insert(nodes.begin() + 3, Json::parse(R"({"name": "q1", "op": "avgpool", "inputs": ["r1"],
                                                  "attrs": {"kernel": [2, 2], "count_include_pad": true}})"));
  nodes.insert(nodes.begin() + 4, Json::parse(R"({"name": "cat", "op": "concat", "inputs": ["p1", "q1"]})"));
  tiny.node("f1")["inputs"] = Json::array({"cat"});
  tiny.tensor("d1.weight") = formats::f32_tensor("d1.weight", {3, 100}, formats_test::ramp(300, 0.001f));
  return tiny;
}

TEST_F(LoaderRuleTest, ScaleShiftAndConcatLoad) {
  TinyModel bn = with_scale_shift();
  const formats::Model a = formats::load_model(bn.write(dir_, "bn"));
  const formats::Node* node = a.find_node("bn");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->op, formats::OpType::ScaleShift);
  EXPECT_EQ(node->output_shape, (formats::Shape{2, 5, 5}));
  ASSERT_TRUE(node->weight && node->bias);
  EXPECT_EQ(node->weight->values, (std::vector<float>{0.5f, -2.0f}));  // 'scale'
  EXPECT_EQ(node->bias->values, (std::vector<float>{1.0f, 0.25f}));    // 'shift'
  EXPECT_EQ(a.parameter_count(), 18 + 2 + 150 + 3 + 4);

  TinyModel cat = with_concat();
  const formats::Model b = formats::load_model(cat.write(dir_, "cat"));
  EXPECT_EQ(b.find_node("cat")->output_shape, (formats::Shape{4, 5, 5}));
  EXPECT_EQ(b.find_node("f1")->output_shape, (formats::Shape{100}));

  // Features of a rank-1 value are its channels.
  TinyModel dense_bn;
  Json& nodes = dense_bn.graph["nodes"];
  nodes.insert(nodes.begin() + 5, Json::parse(R"({"name": "bn", "op": "scale_shift", "inputs": ["d1"],
                                                  "tensors": {"scale": "s", "shift": "t"}})"));
  dense_bn.node("prob")["inputs"] = Json::array({"bn"});
  dense_bn.tensors.push_back(formats::f32_tensor("s", {3}, {1, 2, 3}));
  dense_bn.tensors.push_back(formats::f32_tensor("t", {3}, {0, 0, 0}));
  EXPECT_EQ(formats::load_model(dense_bn.write(dir_, "dense_bn")).find_node("bn")->output_shape,
            (formats::Shape{3}));
}

TEST_F(LoaderRuleTest, ScaleShiftTensorRoles) {
  TinyModel missing = with_scale_shift();
  missing.node("bn")["tensors"].erase("shift");
  expect_graph_error(missing, {"node 'bn'", "scale_shift needs a 'shift' tensor"});
  TinyModel none = with_scale_shift();
  none.node("bn").erase("tensors");
  expect_graph_error(none, {"node 'bn'", "scale_shift needs a 'scale' tensor"});
  TinyModel wrong_role = with_scale_shift();
  wrong_role.node("bn")["tensors"]["weight"] = "bn.scale";
  expect_graph_error(wrong_role, {"node 'bn'", "unknown tensor role 'weight'"});
  TinyModel attrs = with_scale_shift();
  attrs.node("bn")["attrs"] = {{"epsilon", 0.001}};
  expect_graph_error(attrs, {"node 'bn'", "scale_shift takes no attributes"});
}

TEST_F(LoaderRuleTest, ScaleShiftWrongTensorShape) {
  TinyModel channels = with_scale_shift();
  channels.tensor("bn.scale") = formats::f32_tensor("bn.scale", {3}, {1, 2, 3});
  expect_graph_error(channels, {"node 'bn': scale tensor 'bn.scale' has shape [3], expected [2]",
                                "input 'p1' has shape [2, 5, 5]"});
  TinyModel shift = with_scale_shift();
  shift.tensor("bn.shift") = formats::f32_tensor("bn.shift", {50}, formats_test::ramp(50));
  expect_graph_error(shift, {"node 'bn': shift tensor 'bn.shift' has shape [50], expected [2]"});
  TinyModel rank = with_scale_shift();
  rank.tensor("bn.scale") = formats::f32_tensor("bn.scale", {2, 1}, {1, 2});
  expect_graph_error(rank, {"node 'bn': scale tensor 'bn.scale' has shape [2, 1], expected [<input channels>]"});
}

TEST_F(LoaderRuleTest, ConcatDimensionMismatch) {
  TinyModel spatial = with_concat();
  spatial.node("cat")["inputs"] = Json::array({"p1", "r1"});
  expect_graph_error(spatial, {"node 'cat': concat joins along the first (channel) dimension",
                               "'p1' is [2, 5, 5] and 'r1' is [2, 10, 10]"});
  TinyModel rank = with_concat();
  rank.node("cat")["inputs"] = Json::array({"p1", "q1", "image"});
  rank.graph["input"] = Json::parse(R"({"name": "image", "dtype": "float32", "shape": [1, 12, 12]})");
  expect_graph_error(rank, {"node 'cat'", "'p1' is [2, 5, 5] and 'image' is [1, 12, 12]"});
}

TEST_F(LoaderRuleTest, ConcatArityAttrsAndTensors) {
  TinyModel one = with_concat();
  one.node("cat")["inputs"] = Json::array({"p1"});
  expect_graph_error(one, {"node 'cat': concat takes 2 to 4096 inputs, got 1"});
  TinyModel attrs = with_concat();
  attrs.node("cat")["attrs"] = {{"axis", 1}};
  expect_graph_error(attrs, {"node 'cat'", "concat takes no attributes"});
  TinyModel tensors = with_concat();
  tensors.node("cat")["tensors"] = {{"weight", "d1.weight"}};
  expect_graph_error(tensors, {"node 'cat'", "concat has no tensors"});
}

TEST_F(LoaderRuleTest, WindowThatDoesNotFit) {
  TinyModel tiny;
  tiny.node("p1")["attrs"] = {{"kernel", {11, 2}}};
  expect_graph_error(tiny, {"node 'p1': maxpool kernel 11×2 does not fit the input [2, 10, 10]",
                            "height 10 plus padding 0+0 is smaller than the kernel"});
  TinyModel conv;
  conv.graph["input"]["shape"] = Json::array({1, 8, 1});
  conv.graph["input"]["preprocess"]["pad"] = Json::array({0, 0, 0, 1});
  expect_graph_error(conv, {"node 'c1': conv2d kernel 3×3 does not fit the input [1, 8, 2]", "width 2"});
}

TEST_F(LoaderRuleTest, LabelsLengthMustMatchFirstOutput) {
  TinyModel tiny;
  tiny.graph["labels"] = Json::array({"a", "b"});
  expect_graph_error(tiny, {"labels has 2 entries, but the first output 'prob' has 3 elements"});
  TinyModel empty;
  empty.graph["labels"] = Json::array();
  expect_graph_error(empty, {"'labels' is empty"});
}

TEST_F(LoaderRuleTest, NodeOutputOver2Pow31Elements) {
  // 65536 output channels over a 182×182 map: 2.17e9 elements per sample, weights only 256 KiB.
  TinyModel tiny;
  tiny.graph["input"] = Json::parse(R"({"name": "image", "dtype": "float32", "shape": [1, 182, 182]})");
  tiny.node("c1")["attrs"] = {{"kernel", {1, 1}}, {"out_channels", 65536}};
  tiny.node("c1")["tensors"].erase("bias");
  tiny.tensors = {formats::f32_tensor("c1.weight", {65536, 1, 1, 1}, std::vector<float>(65536)),
                  tiny.tensor("d1.weight"), tiny.tensor("d1.bias")};
  expect_graph_error(tiny, {"node 'c1': output shape [65536, 182, 182] has more than 2147483647 elements"});
}

}  // namespace

// load_model on valid files: what the Model holds, topological order, accepted variations.
#include <gtest/gtest.h>

#include <filesystem>

#include "formats/model_loader.hpp"
#include "formats/sha256.hpp"
#include "test_files.hpp"

namespace {

using formats::OpType;
using formats::Shape;
using formats_test::Json;
using formats_test::TinyModel;

class LoadModelTest : public formats_test::TempDirTest {};

std::vector<std::string> node_names(const formats::Model& model) {
  std::vector<std::string> names;
  for (const auto& node : model.nodes) names.push_back(node.name);
  return names;
}

TEST_F(LoadModelTest, TinyModelLoadsWithShapesTensorsAndPreprocess) {
  TinyModel tiny;
  const std::string graph = tiny.write(dir_);
  const formats::Model model = formats::load_model(graph);

  EXPECT_EQ(model.name, "tiny");
  EXPECT_EQ(model.description, "a tiny test model");
  EXPECT_EQ(model.source_path, graph);
  EXPECT_EQ(std::filesystem::path(model.weights_path), dir_ / "tiny.safetensors");
  EXPECT_EQ(model.labels, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(model.outputs, (std::vector<std::string>{"prob"}));

  EXPECT_EQ(model.input.name, "image");
  EXPECT_EQ(model.input.dtype, formats::InputDType::UInt8);
  EXPECT_EQ(model.input.raw_shape, (Shape{1, 8, 8}));
  EXPECT_EQ(model.input.shape, (Shape{1, 12, 12}));
  ASSERT_TRUE(model.input.preprocess);
  EXPECT_FLOAT_EQ(model.input.preprocess->scale, 1.0f / 255.0f);
  EXPECT_EQ(model.input.preprocess->mean, (std::vector<float>{0.5f}));
  EXPECT_EQ(model.input.preprocess->std, (std::vector<float>{0.25f}));
  EXPECT_EQ(model.input.preprocess->pad_left, 2);
  EXPECT_EQ(model.input.preprocess->pad_value, -2.0f);

  ASSERT_EQ(node_names(model), (std::vector<std::string>{"c1", "r1", "p1", "f1", "d1", "prob"}));
  const formats::Node& c1 = model.nodes[0];
  EXPECT_EQ(c1.op, OpType::Conv2D);
  EXPECT_EQ(c1.out_channels, 2);
  EXPECT_EQ(c1.window.kernel_h, 3);
  EXPECT_EQ(c1.output_shape, (Shape{2, 10, 10}));
  ASSERT_TRUE(c1.weight && c1.bias);
  EXPECT_EQ(c1.weight->name, "c1.weight");
  EXPECT_EQ(c1.weight->shape, (Shape{2, 1, 3, 3}));
  EXPECT_EQ(c1.weight->values, formats_test::ramp(18));
  EXPECT_EQ(c1.bias->values, (std::vector<float>{0.25f, -0.25f}));

  const formats::Node& p1 = model.nodes[2];
  EXPECT_EQ(p1.window.stride_h, 2) << "pool stride defaults to the kernel";
  EXPECT_EQ(p1.window.stride_w, 2);
  EXPECT_EQ(p1.output_shape, (Shape{2, 5, 5}));
  EXPECT_EQ(model.nodes[3].output_shape, (Shape{50}));
  EXPECT_EQ(model.nodes[4].output_shape, (Shape{3}));
  EXPECT_EQ(model.nodes[4].weight->shape, (Shape{3, 50}));
  EXPECT_EQ(model.nodes[5].output_shape, (Shape{3}));
  EXPECT_EQ(model.parameter_count(), 18 + 2 + 150 + 3);
  EXPECT_EQ(model.value_shape("image"), (Shape{1, 12, 12}));
}

TEST_F(LoadModelTest, DagWithAddListedOutOfOrderIsSortedStably) {
  TinyModel tiny;
  tiny.graph["input"] = Json::parse(R"({"name": "x", "dtype": "float32", "shape": [4]})");
  tiny.graph["nodes"] = Json::parse(R"([
    {"name": "sum", "op": "add", "inputs": ["r", "t"]},
    {"name": "prob", "op": "softmax", "inputs": ["sum"]},
    {"name": "t", "op": "tanh", "inputs": ["x"]},
    {"name": "s", "op": "sigmoid", "inputs": ["x"]},
    {"name": "r", "op": "relu", "inputs": ["x"]}
  ])");
  tiny.graph["outputs"] = Json::array({"prob", "s"});
  tiny.graph["labels"] = Json::array({"a", "b", "c", "d"});
  tiny.tensors.clear();
  const formats::Model model = formats::load_model(tiny.write(dir_));
  // t, s, r have no node inputs and keep their file order; sum waits for r, prob for sum.
  EXPECT_EQ(node_names(model), (std::vector<std::string>{"t", "s", "r", "sum", "prob"}));
  EXPECT_EQ(model.input.shape, (Shape{4}));
  EXPECT_FALSE(model.input.preprocess);
  EXPECT_EQ(model.value_shape("sum"), (Shape{4}));
  EXPECT_EQ(model.outputs, (std::vector<std::string>{"prob", "s"}));
}

TEST_F(LoadModelTest, ValueUsedTwiceAndAddOfSameValue) {
  TinyModel tiny;
  tiny.graph["input"] = Json::parse(R"({"name": "x", "dtype": "float32", "shape": [2, 3]})");
  tiny.graph["nodes"] = Json::parse(R"([
    {"name": "double", "op": "add", "inputs": ["x", "x"]},
    {"name": "flat", "op": "flatten", "inputs": ["double"]}
  ])");
  tiny.graph["outputs"] = Json::array({"flat"});
  tiny.graph.erase("labels");
  tiny.tensors.clear();
  const formats::Model model = formats::load_model(tiny.write(dir_));
  EXPECT_EQ(model.value_shape("flat"), (Shape{6}));
  EXPECT_TRUE(model.labels.empty());
}

TEST_F(LoadModelTest, OptionalPartsMayBeOmitted) {
  TinyModel tiny;
  tiny.graph.erase("description");
  tiny.graph.erase("labels");
  tiny.graph["input"]["preprocess"].erase("pad");
  tiny.graph["input"]["preprocess"].erase("pad_value");
  tiny.node("c1")["attrs"].erase("stride");
  tiny.node("c1")["attrs"].erase("padding");
  tiny.node("c1")["tensors"].erase("bias");
  tiny.node("r1")["attrs"] = Json::object();
  tiny.node("r1")["tensors"] = Json::object();
  tiny.node("d1")["tensors"].erase("bias");
  tiny.tensors = {tiny.tensor("c1.weight"), formats::f32_tensor("d1.weight", {3, 18}, formats_test::ramp(54))};
  const formats::Model model = formats::load_model(tiny.write(dir_));
  EXPECT_EQ(model.input.shape, (Shape{1, 8, 8}));
  EXPECT_EQ(model.nodes[0].output_shape, (Shape{2, 6, 6}));
  EXPECT_FALSE(model.nodes[0].bias);
  EXPECT_EQ(model.nodes[0].window.stride_h, 1);
  EXPECT_FALSE(model.nodes[4].bias);
  EXPECT_EQ(model.input.preprocess->pad_value, 0.0f);
}

TEST_F(LoadModelTest, AvgPoolKerasSamePaddingAndStrides) {
  TinyModel tiny;
  // Keras 'same' for an even kernel: one more at the bottom/right.
  tiny.node("p1") = Json::parse(R"({"name": "p1", "op": "avgpool", "inputs": ["r1"],
      "attrs": {"kernel": [4, 4], "stride": [3, 3], "padding": [1, 2, 1, 2], "count_include_pad": false}})");
  tiny.tensor("d1.weight") = formats::f32_tensor("d1.weight", {3, 32}, formats_test::ramp(96));
  const formats::Model model = formats::load_model(tiny.write(dir_));
  const formats::Node& p1 = *model.find_node("p1");
  EXPECT_EQ(p1.op, OpType::AvgPool);
  EXPECT_FALSE(p1.count_include_pad);
  EXPECT_EQ(p1.window.pad_bottom, 2);
  EXPECT_EQ(p1.output_shape, (Shape{2, 4, 4}));  // floor((10 + 3 - 4) / 3) + 1
}

TEST_F(LoadModelTest, WeightsInASubfolderAndGraphGivenRelatively) {
  TinyModel tiny;
  std::filesystem::create_directories(dir_ / "weights");
  tiny.graph["weights"]["file"] = "weights/tiny.safetensors";
  formats::write_safetensors((dir_ / "weights" / "tiny.safetensors").string(), tiny.tensors);
  tiny.graph["weights"]["sha256"] =
      formats::sha256_hex(formats_test::read_bytes((dir_ / "weights" / "tiny.safetensors").string()));
  tiny.fix_sha256 = false;
  const std::string graph = tiny.write(dir_);
  const formats::Model model = formats::load_model(graph);
  EXPECT_EQ(std::filesystem::path(model.weights_path), dir_ / "weights" / "tiny.safetensors");
}

TEST_F(LoadModelTest, GraphFileInCurrentFolder) {
  TinyModel tiny;
  tiny.write(dir_);
  const auto previous = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  formats::Model model;
  EXPECT_NO_THROW(model = formats::load_model("tiny.json"));
  std::filesystem::current_path(previous);
  EXPECT_EQ(model.weights_path, "tiny.safetensors");
}

TEST_F(LoadModelTest, CommittedModelsLoad) {
  // Every model in models/ must load; the folder may still be empty during bring-up.
  const std::filesystem::path models = std::filesystem::path(ENGINE_SOURCE_DIR) / "models";
  int loaded = 0;
  if (std::filesystem::is_directory(models)) {
    for (const auto& entry : std::filesystem::directory_iterator(models)) {
      if (entry.path().extension() != ".json") continue;
      SCOPED_TRACE(entry.path().string());
      EXPECT_NO_THROW(formats::load_model(entry.path().string()));
      ++loaded;
    }
  }
  if (loaded == 0) GTEST_SKIP() << "no models/*.json committed yet";
}

}  // namespace

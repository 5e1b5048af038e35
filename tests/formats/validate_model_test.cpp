// validate_model on models built in code (tests, importers): same rules as files, shapes filled in.
#include <gtest/gtest.h>

#include "formats/model_loader.hpp"
#include "test_files.hpp"

namespace {

using formats::Node;
using formats::OpType;
using formats::Shape;

Node make_node(const std::string& name, OpType op, std::vector<std::string> inputs) {
  Node node;
  node.name = name;
  node.op = op;
  node.inputs = std::move(inputs);
  return node;
}

// float32 [3, 6, 6] → conv "c" (4 channels, 3×3, padding 1) → avgpool "p" 2×2 → flatten "f" →
// dense "d" (5 units).
formats::Model code_model() {
  formats::Model model;
  model.name = "code";
  model.input.name = "x";
  model.input.dtype = formats::InputDType::Float32;
  model.input.raw_shape = {3, 6, 6};
  Node conv = make_node("c", OpType::Conv2D, {"x"});
  conv.out_channels = 4;
  conv.window = {3, 3, 1, 1, 1, 1, 1, 1};
  conv.weight = formats::Tensor{"c.w", {4, 3, 3, 3}, std::vector<float>(108, 0.5f)};
  conv.bias = formats::Tensor{"c.b", {4}, std::vector<float>(4, 0.0f)};
  Node pool = make_node("p", OpType::AvgPool, {"c"});
  pool.window = {2, 2, 2, 2, 0, 0, 0, 0};
  pool.count_include_pad = false;
  Node dense = make_node("d", OpType::Dense, {"f"});
  dense.units = 5;
  dense.weight = formats::Tensor{"d.w", {5, 36}, std::vector<float>(180, 0.1f)};
  // Listed out of order on purpose: validate_model sorts.
  model.nodes = {conv, dense, pool, make_node("f", OpType::Flatten, {"p"})};
  model.outputs = {"d"};
  return model;
}

TEST(ValidateModelTest, FillsShapesAndSorts) {
  formats::Model model = code_model();
  formats::validate_model(model, "code model");
  ASSERT_EQ(model.nodes.size(), 4u);
  EXPECT_EQ(model.nodes[0].name, "c");
  EXPECT_EQ(model.nodes[1].name, "p");
  EXPECT_EQ(model.nodes[2].name, "f");
  EXPECT_EQ(model.nodes[3].name, "d");
  EXPECT_EQ(model.input.shape, (Shape{3, 6, 6}));
  EXPECT_EQ(model.nodes[0].output_shape, (Shape{4, 6, 6}));
  EXPECT_EQ(model.nodes[1].output_shape, (Shape{4, 3, 3}));
  EXPECT_EQ(model.nodes[2].output_shape, (Shape{36}));
  EXPECT_EQ(model.nodes[3].output_shape, (Shape{5}));
  EXPECT_EQ(model.parameter_count(), 108 + 4 + 180);
}

TEST(ValidateModelTest, Uint8InputGetsPaddedShape) {
  formats::Model model;
  model.input.name = "img";
  model.input.dtype = formats::InputDType::UInt8;
  model.input.raw_shape = {1, 28, 28};
  formats::Preprocess preprocess;
  preprocess.mean = {0.0f};
  preprocess.std = {1.0f};
  preprocess.pad_top = preprocess.pad_bottom = preprocess.pad_left = preprocess.pad_right = 2;
  model.input.preprocess = preprocess;
  model.nodes = {make_node("t", OpType::Tanh, {"img"})};
  model.outputs = {"t"};
  formats::validate_model(model, "lenet-like");
  EXPECT_EQ(model.input.shape, (Shape{1, 32, 32}));
  EXPECT_EQ(model.nodes[0].output_shape, (Shape{1, 32, 32}));
}

TEST(ValidateModelTest, MissingWeight) {
  formats::Model model = code_model();
  model.nodes[0].weight.reset();
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "node 'c': conv2d needs a weight");
}

TEST(ValidateModelTest, WeightOnAnOpWithoutParameters) {
  formats::Model model = code_model();
  model.nodes[3].weight = formats::Tensor{"x", {1}, {1.0f}};
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "node 'f': flatten takes no weight or bias");
}

TEST(ValidateModelTest, TensorValuesDisagreeWithShape) {
  formats::Model model = code_model();
  model.nodes[0].weight->values.pop_back();
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "node 'c': weight tensor 'c.w' holds 107 values, but its shape [4, 3, 3, 3] needs 108");
}

TEST(ValidateModelTest, WeightShapeNamesTheNode) {
  formats::Model model = code_model();
  model.nodes[0].weight = formats::Tensor{"", {4, 2, 3, 3}, std::vector<float>(72)};
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "node 'c': weight has shape [4, 2, 3, 3], expected [4, 3, 3, 3]");
}

TEST(ValidateModelTest, AttributeRange) {
  formats::Model model = code_model();
  model.nodes[2].window.stride_h = 0;
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "node 'p': stride must be at least 1");
}

TEST(ValidateModelTest, Cycle) {
  formats::Model model = code_model();
  model.nodes[0].inputs = {"d"};
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "the graph has a cycle");
}

TEST(ValidateModelTest, InputWithoutName) {
  formats::Model model = code_model();
  model.input.name.clear();
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "input: name must not be empty");
}

TEST(ValidateModelTest, NegativeRawDimension) {
  formats::Model model = code_model();
  model.input.raw_shape = {3, -6, 6};
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "code model"), "code model",
                      "has a dimension below 1");
}

TEST(ValidateModelTest, FlattenOfAHugeMapStaysInLimits) {
  // 65536 × 46341 > 2^31 - 1: the conv output itself is rejected before flatten sees it.
  formats::Model model;
  model.input.name = "x";
  model.input.dtype = formats::InputDType::Float32;
  model.input.raw_shape = {1, 46341, 1};
  Node conv = make_node("c", OpType::Conv2D, {"x"});
  conv.out_channels = 65536;
  conv.weight = formats::Tensor{"w", {65536, 1, 1, 1}, std::vector<float>(65536)};
  model.nodes = {conv, make_node("f", OpType::Flatten, {"c"})};
  model.outputs = {"f"};
  EXPECT_FORMAT_ERROR(formats::validate_model(model, "huge"), "huge",
                      "node 'c': output shape [65536, 46341, 1] has more than 2147483647 elements");
}

}  // namespace

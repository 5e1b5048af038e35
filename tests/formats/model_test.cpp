// Model helpers: element counts, shape text, op names, lookups.
#include <gtest/gtest.h>

#include <climits>

#include "formats/model.hpp"

namespace {

using formats::OpType;
using formats::Shape;

TEST(ModelTest, ElementCountMultipliesDimensions) {
  EXPECT_EQ(formats::element_count({6, 28, 28}), 4704);
  EXPECT_EQ(formats::element_count({}), 1);
  EXPECT_EQ(formats::element_count({3, 0, 5}), 0);
}

TEST(ModelTest, CheckedElementCountRejectsOverflowAndNegatives) {
  EXPECT_EQ(formats::checked_element_count({1 << 20, 1 << 20}), int64_t{1} << 40);
  EXPECT_FALSE(formats::checked_element_count({INT64_MAX, 2}));
  EXPECT_FALSE(formats::checked_element_count({1 << 30, 1 << 30, 1 << 30}));
  EXPECT_FALSE(formats::checked_element_count({4, -1}));
  EXPECT_THROW(formats::element_count({INT64_MAX, 3}), std::overflow_error);
}

TEST(ModelTest, ShapeToString) {
  EXPECT_EQ(formats::shape_to_string({6, 28, 28}), "[6, 28, 28]");
  EXPECT_EQ(formats::shape_to_string({10}), "[10]");
  EXPECT_EQ(formats::shape_to_string({}), "[]");
}

TEST(ModelTest, OpNamesRoundTrip) {
  const OpType all[] = {OpType::Conv2D, OpType::AvgPool, OpType::MaxPool, OpType::Relu,
                        OpType::Tanh,   OpType::Sigmoid, OpType::Flatten, OpType::Dense,
                        OpType::Softmax, OpType::Add};
  for (OpType op : all) {
    EXPECT_EQ(formats::op_from_name(formats::op_name(op)), op) << formats::op_name(op);
  }
  EXPECT_STREQ(formats::op_name(OpType::Conv2D), "conv2d");
  EXPECT_STREQ(formats::op_name(OpType::AvgPool), "avgpool");
  EXPECT_FALSE(formats::op_from_name("Conv2D"));
  EXPECT_FALSE(formats::op_from_name("conv"));
  EXPECT_FALSE(formats::op_from_name(""));
}

TEST(ModelTest, FindNodeValueShapeAndParameterCount) {
  formats::Model model;
  model.input.name = "x";
  model.input.shape = {4};
  formats::Node dense;
  dense.name = "d";
  dense.op = OpType::Dense;
  dense.units = 2;
  dense.weight = formats::Tensor{"w", {2, 4}, std::vector<float>(8)};
  dense.bias = formats::Tensor{"b", {2}, std::vector<float>(2)};
  dense.output_shape = {2};
  model.nodes.push_back(dense);

  ASSERT_NE(model.find_node("d"), nullptr);
  EXPECT_EQ(model.find_node("d")->units, 2);
  EXPECT_EQ(model.find_node("x"), nullptr);
  EXPECT_EQ(model.value_shape("x"), (Shape{4}));
  EXPECT_EQ(model.value_shape("d"), (Shape{2}));
  EXPECT_THROW(model.value_shape("nope"), std::out_of_range);
  EXPECT_EQ(model.parameter_count(), 10);
}

}  // namespace

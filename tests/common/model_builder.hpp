#pragma once
// Small graphs written in a few lines for planner and op tests. Parameters are random from a seed;
// build() runs formats::validate_model, so a model that builds is one a file could describe.
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/model.hpp"
#include "formats/model_loader.hpp"
#include "tests/common/test_models.hpp"

namespace testing_support {

inline formats::Window2D window(int kh, int kw, int sh, int sw, int top = 0, int bottom = 0, int left = 0,
                                int right = 0) {
  return formats::Window2D{kh, kw, sh, sw, top, bottom, left, right};
}

class ModelBuilder {
 public:
  // float32 input named "x" of the given per-sample shape.
  ModelBuilder(std::string name, formats::Shape input_shape) : model_(std::make_shared<formats::Model>()) {
    model_->name = std::move(name);
    model_->input.name = "x";
    model_->input.dtype = formats::InputDType::Float32;
    model_->input.raw_shape = input_shape;
    model_->input.shape = std::move(input_shape);
  }

  // Turns the input into uint8 pixels [C, H, W] with preprocessing.
  ModelBuilder& uint8_input(formats::Shape raw_shape, formats::Preprocess preprocess) {
    model_->input.dtype = formats::InputDType::UInt8;
    model_->input.raw_shape = std::move(raw_shape);
    model_->input.preprocess = std::move(preprocess);
    return *this;
  }

  ModelBuilder& conv2d(const std::string& name, const std::string& input, int in_channels, int out_channels,
                       formats::Window2D win, uint32_t seed, bool with_bias = true) {
    formats::Node n = node(name, formats::OpType::Conv2D, {input});
    n.out_channels = out_channels;
    n.window = win;
    const int64_t fan_in = int64_t(in_channels) * win.kernel_h * win.kernel_w;
    n.weight = tensor(name + ".weight", {out_channels, in_channels, win.kernel_h, win.kernel_w}, seed, fan_in);
    if (with_bias) n.bias = tensor(name + ".bias", {out_channels}, seed + 1, fan_in);
    model_->nodes.push_back(std::move(n));
    return *this;
  }

  ModelBuilder& pool(const std::string& name, formats::OpType op, const std::string& input, formats::Window2D win,
                     bool count_include_pad = true) {
    formats::Node n = node(name, op, {input});
    n.window = win;
    n.count_include_pad = count_include_pad;
    model_->nodes.push_back(std::move(n));
    return *this;
  }

  ModelBuilder& dense(const std::string& name, const std::string& input, int in_features, int units, uint32_t seed,
                      bool with_bias = true) {
    formats::Node n = node(name, formats::OpType::Dense, {input});
    n.units = units;
    n.weight = tensor(name + ".weight", {units, in_features}, seed, in_features);
    if (with_bias) n.bias = tensor(name + ".bias", {units}, seed + 1, in_features);
    model_->nodes.push_back(std::move(n));
    return *this;
  }

  // relu, tanh, sigmoid, flatten, softmax.
  ModelBuilder& unary(const std::string& name, formats::OpType op, const std::string& input) {
    model_->nodes.push_back(node(name, op, {input}));
    return *this;
  }

  ModelBuilder& add(const std::string& name, const std::string& a, const std::string& b) {
    model_->nodes.push_back(node(name, formats::OpType::Add, {a, b}));
    return *this;
  }

  // Random scales in [-2, 2) and shifts in [-1, 1), one per channel.
  ModelBuilder& scale_shift(const std::string& name, const std::string& input, int channels, uint32_t seed) {
    formats::Node n = node(name, formats::OpType::ScaleShift, {input});
    n.weight = formats::Tensor{name + ".scale", {channels}, random_floats(size_t(channels), seed, -2.0f, 2.0f)};
    n.bias = formats::Tensor{name + ".shift", {channels}, random_floats(size_t(channels), seed + 1, -1.0f, 1.0f)};
    model_->nodes.push_back(std::move(n));
    return *this;
  }

  ModelBuilder& concat(const std::string& name, std::vector<std::string> inputs) {
    model_->nodes.push_back(node(name, formats::OpType::Concat, std::move(inputs)));
    return *this;
  }

  ModelBuilder& outputs(std::vector<std::string> names) {
    model_->outputs = std::move(names);
    return *this;
  }

  std::shared_ptr<formats::Model> build() {
    formats::validate_model(*model_, "ModelBuilder(" + model_->name + ")");
    return model_;
  }

 private:
  static formats::Node node(const std::string& name, formats::OpType op, std::vector<std::string> inputs) {
    formats::Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    return n;
  }
  // Uniform in ±1/sqrt(fan_in), so activations stay of order 1 through a deep stack.
  static formats::Tensor tensor(const std::string& name, formats::Shape shape, uint32_t seed, int64_t fan_in) {
    formats::Tensor t;
    t.name = name;
    t.shape = std::move(shape);
    const float bound = 1.0f / float(std::sqrt(double(fan_in > 0 ? fan_in : 1)));
    t.values = random_floats(size_t(formats::element_count(t.shape)), seed, -bound, bound);
    return t;
  }

  std::shared_ptr<formats::Model> model_;
};

// A LeNet-5-shaped model with random weights (seeds from `seed`): uint8 [1, 28, 28] input, MNIST
// preprocessing padded to 32x32, conv 6@5x5 → tanh → avgpool 2x2 → conv 16@5x5 → act3 → maxpool
// (s4_window) → flatten → dense 120 → relu → dense 84 → act6 → dense 10 → softmax. Tests vary the
// activations and the second pool to cover fusion patterns and padded windows.
struct LenetLike {
  std::string name = "lenet_like";
  uint32_t seed = 1;
  formats::OpType act3 = formats::OpType::Sigmoid;
  formats::Window2D s4_window = window(2, 2, 2, 2);
  formats::OpType act6 = formats::OpType::Tanh;
  bool logits_output = false;  // also output the last dense layer's values
};
inline std::shared_ptr<formats::Model> lenet_like_model(const LenetLike& o = {}) {
  using formats::OpType;
  formats::Preprocess p;
  p.scale = 1.0f / 255.0f;
  p.mean = {0.1307f};
  p.std = {0.3081f};
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 2;
  std::vector<std::string> outputs{"prob"};
  if (o.logits_output) outputs.push_back("d7");
  return ModelBuilder(o.name, {1})
      .uint8_input({1, 28, 28}, p)
      .conv2d("c1", "x", 1, 6, window(5, 5, 1, 1), o.seed)
      .unary("t1", OpType::Tanh, "c1")
      .pool("s2", OpType::AvgPool, "t1", window(2, 2, 2, 2))
      .conv2d("c3", "s2", 6, 16, window(5, 5, 1, 1), o.seed + 2)
      .unary("a3", o.act3, "c3")
      .pool("s4", OpType::MaxPool, "a3", o.s4_window)
      .unary("f", OpType::Flatten, "s4")
      .dense("d5", "f", 400, 120, o.seed + 4)
      .unary("r5", OpType::Relu, "d5")
      .dense("d6", "r5", 120, 84, o.seed + 6)
      .unary("a6", o.act6, "d6")
      .dense("d7", "a6", 84, 10, o.seed + 8)
      .unary("prob", OpType::Softmax, "d7")
      .outputs(outputs)
      .build();
}

// BatchNorm after pooling and parallel branches joined, as the importers write them: two conv
// branches (3x3 'same' and 1x1) of the [C, H, W] input concatenated, relu, maxpool 2x2, scale_shift
// over the channels, flatten, dense 10, scale_shift over the features, softmax. H and W even.
inline std::shared_ptr<formats::Model> branchy_model(const formats::Shape& input, uint32_t seed) {
  using formats::OpType;
  const int c = int(input.at(0)), h = int(input.at(1)), w = int(input.at(2));
  const int features = 7 * (h / 2) * (w / 2);
  return ModelBuilder("branchy", input)
      .conv2d("a", "x", c, 4, window(3, 3, 1, 1, 1, 1, 1, 1), seed)
      .conv2d("b", "x", c, 3, window(1, 1, 1, 1), seed + 2)
      .concat("ab", {"a", "b"})
      .unary("r", OpType::Relu, "ab")
      .pool("p", OpType::MaxPool, "r", window(2, 2, 2, 2))
      .scale_shift("bn", "p", 7, seed + 4)
      .unary("f", OpType::Flatten, "bn")
      .dense("d", "f", features, 10, seed + 6)
      .scale_shift("bn2", "d", 10, seed + 8)
      .unary("prob", OpType::Softmax, "bn2")
      .outputs({"prob"})
      .build();
}

}  // namespace testing_support

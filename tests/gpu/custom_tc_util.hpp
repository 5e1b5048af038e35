#pragma once
// Members of the tensor-core chain's family (engine/custom/fused/tc_chain_params.hpp) built in code:
// any channel and unit counts within its limits, any activations and pools, with or without the
// softmax; float32 input [1, 32, 32], uint8 [1, 28, 28] padded by 2 in the preprocessing (as
// models/lenet5.json), or float32 [1, 28, 28] that the first convolution pads by 2 (as the zoo's LeNet-5s).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"

namespace tc_test {

using formats::OpType;

struct Family {
  std::string name = "tc_family";
  int c1 = 6, c3 = 16, f5 = 120, f6 = 84, f7 = 10;
  std::optional<OpType> act1 = OpType::Tanh, act3 = OpType::Tanh, act5 = OpType::Tanh, act6 = OpType::Tanh, act7;
  OpType pool1 = OpType::AvgPool, pool3 = OpType::AvgPool;
  bool softmax = true;
  bool uint8 = false;
  bool conv_pad = false;  // a [1, 28, 28] input (float32, or uint8 not padded by the preprocessing), c1 padded by 2
  uint32_t seed = 1;
};

inline std::shared_ptr<formats::Model> family_model(const Family& f) {
  using testing_support::window;
  testing_support::ModelBuilder b(f.name, f.uint8      ? formats::Shape{1}
                                          : f.conv_pad ? formats::Shape{1, 28, 28}
                                                       : formats::Shape{1, 32, 32});
  if (f.uint8) {
    formats::Preprocess p;
    p.scale = 1.0f / 255.0f;
    p.mean = {0.1307f};
    p.std = {0.3081f};
    if (!f.conv_pad) p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 2;
    b.uint8_input({1, 28, 28}, p);
  }
  std::string last = "x";
  auto act = [&](const std::optional<OpType>& a, const std::string& name) {
    if (!a) return;
    b.unary(name, *a, last);
    last = name;
  };
  b.conv2d("c1", last, 1, f.c1, f.conv_pad ? window(5, 5, 1, 1, 2, 2, 2, 2) : window(5, 5, 1, 1), f.seed);
  last = "c1";
  act(f.act1, "a1");
  b.pool("p1", f.pool1, last, window(2, 2, 2, 2));
  b.conv2d("c3", "p1", f.c1, f.c3, window(5, 5, 1, 1), f.seed + 2);
  last = "c3";
  act(f.act3, "a3");
  b.pool("p3", f.pool3, last, window(2, 2, 2, 2));
  b.unary("flat", OpType::Flatten, "p3");
  b.dense("f5", "flat", f.c3 * 25, f.f5, f.seed + 4);
  last = "f5";
  act(f.act5, "a5");
  b.dense("f6", last, f.f5, f.f6, f.seed + 6);
  last = "f6";
  act(f.act6, "a6");
  b.dense("f7", last, f.f6, f.f7, f.seed + 8);
  last = "f7";
  act(f.act7, "a7");
  if (f.softmax) {
    b.unary("prob", OpType::Softmax, last);
    last = "prob";
  }
  auto model = b.outputs({last}).build();
  // The builder's weights (+-1/sqrt(fan_in)) leave the softmax's outputs all alike (~1/units each),
  // where swapped images or units hardly show: the last layer's weights x 8 make them distinct, as a
  // trained model's are. (Without the softmax, the outputs differ from image to image as they are.)
  for (auto& node : model->nodes)
    if (node.name == "f7" && f.softmax)
      for (float& w : node.weight->values) w *= 8.0f;
  return model;
}

// The spread of members the tests run: LeNet-5's shape, and others that move every limit and option.
inline std::vector<Family> families() {
  std::vector<Family> v;
  v.push_back(Family{});
  Family a;
  a.name = "relu_max_small";
  a.c1 = 3, a.c3 = 11, a.f5 = 37, a.f6 = 19, a.f7 = 7;
  a.act1 = a.act3 = a.act5 = a.act6 = OpType::Relu;
  a.pool1 = a.pool3 = OpType::MaxPool;
  a.seed = 21;
  v.push_back(a);
  Family b;
  b.name = "sigmoid_full_no_softmax";
  b.c1 = 8, b.c3 = 16, b.f5 = 128, b.f6 = 96, b.f7 = 16;
  b.act1 = OpType::Sigmoid, b.act3 = std::nullopt, b.act5 = OpType::Sigmoid, b.act6 = std::nullopt;
  b.act7 = OpType::Tanh;
  b.pool3 = OpType::MaxPool;
  b.softmax = false;
  b.seed = 41;
  v.push_back(b);
  Family c;
  c.name = "one_unit_each";
  c.c1 = 1, c.c3 = 1, c.f5 = 1, c.f6 = 1, c.f7 = 2;
  c.act5 = OpType::Relu, c.act6 = std::nullopt;
  c.seed = 61;
  v.push_back(c);
  return v;
}

// Images [n][28][28] as the [n][32][32] that a first convolution padded by 2 reads: zeros around them.
inline std::vector<float> padded_images(const std::vector<float>& x, int n) {
  std::vector<float> out(size_t(n) * 32 * 32, 0.0f);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < 28; ++r)
      std::copy_n(x.data() + (size_t(i) * 28 + size_t(r)) * 28, 28, out.data() + (size_t(i) * 32 + size_t(r) + 2) * 32 + 2);
  return out;
}

// The model with a calibration of `n` samples of `input` (raw: floats, or uint8 bytes), as engine
// calibrate's max method computes it: every node's largest |value| on the reference backend, and the
// preprocessed input's.
inline std::shared_ptr<formats::Model> calibrated(const std::shared_ptr<formats::Model>& model, const void* input,
                                                  int n) {
  auto probe = std::make_shared<formats::Model>(*model);
  probe->outputs.clear();
  for (const auto& node : model->nodes) probe->outputs.push_back(node.name);
  const auto values = testing_support::run_backend(probe, "reference", input, n, n);
  formats::Calibration cal;
  cal.method = "max";
  cal.images = n;
  cal.data = "tests";
  const size_t raw = size_t(formats::element_count(model->input.raw_shape)) * size_t(n);
  double in_hi = 0;
  if (model->input.dtype == formats::InputDType::UInt8) {
    const auto& p = *model->input.preprocess;
    const auto* bytes = static_cast<const uint8_t*>(input);
    in_hi = std::fabs(p.pad_value);
    for (size_t i = 0; i < raw; ++i)
      in_hi = std::max(in_hi, std::fabs((double(bytes[i]) * p.scale - p.mean[0]) / p.std[0]));
  } else {
    const auto* f = static_cast<const float*>(input);
    for (size_t i = 0; i < raw; ++i) in_hi = std::max(in_hi, std::fabs(double(f[i])));
  }
  cal.ranges.push_back({model->input.name, in_hi});
  for (size_t k = 0; k < values.size(); ++k) {
    double hi = 0;
    for (float v : values[k]) hi = std::max(hi, std::fabs(double(v)));
    cal.ranges.push_back({model->nodes[k].name, hi});
  }
  auto out = std::make_shared<formats::Model>(*model);
  out->calibration = cal;
  return out;
}

}  // namespace tc_test

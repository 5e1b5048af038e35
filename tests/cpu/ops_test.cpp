// Each CPU op against a naive formula written here, straight from model-format-v1.md, in double.
// The backend accumulates in double and rounds once, so it must agree to about one float ulp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace {

using formats::OpType;
using formats::Window2D;
using testing_support::window;

constexpr int kBatches[] = {1, 37};

// One float rounding of a value computed in double, plus a little for a different summation order.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1.2e-7 * std::fabs(want[i]) + 1e-12;
    ASSERT_NEAR(got[i], want[i], tol) << what << " element " << i;
  }
}

int out_size(int in, int k, int s, int before, int after) { return (in + before + after - k) / s + 1; }

// y[o,i,j] = bias[o] + sum_c sum_p sum_q x[c, i*sh + p - t, j*sw + q - l] * w[o,c,p,q], x = 0 outside.
std::vector<double> naive_conv(const float* x, int C, int H, int W, const formats::Node& n) {
  const Window2D& w = n.window;
  const int O = n.out_channels;
  const int OH = out_size(H, w.kernel_h, w.stride_h, w.pad_top, w.pad_bottom);
  const int OW = out_size(W, w.kernel_w, w.stride_w, w.pad_left, w.pad_right);
  std::vector<double> y(size_t(O) * OH * OW);
  for (int o = 0; o < O; ++o)
    for (int i = 0; i < OH; ++i)
      for (int j = 0; j < OW; ++j) {
        double acc = n.bias ? n.bias->values[o] : 0.0;
        for (int c = 0; c < C; ++c)
          for (int p = 0; p < w.kernel_h; ++p)
            for (int q = 0; q < w.kernel_w; ++q) {
              const int yy = i * w.stride_h + p - w.pad_top, xx = j * w.stride_w + q - w.pad_left;
              const double xv = (yy >= 0 && yy < H && xx >= 0 && xx < W) ? x[(c * H + yy) * W + xx] : 0.0;
              acc += xv * n.weight->values[((o * C + c) * w.kernel_h + p) * w.kernel_w + q];
            }
        y[(o * OH + i) * OW + j] = acc;
      }
  return y;
}

std::vector<double> naive_pool(const float* x, int C, int H, int W, const formats::Node& n) {
  const Window2D& w = n.window;
  const int OH = out_size(H, w.kernel_h, w.stride_h, w.pad_top, w.pad_bottom);
  const int OW = out_size(W, w.kernel_w, w.stride_w, w.pad_left, w.pad_right);
  std::vector<double> y(size_t(C) * OH * OW);
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < OH; ++i)
      for (int j = 0; j < OW; ++j) {
        double sum = 0, best = -std::numeric_limits<double>::infinity();
        int inside = 0;
        for (int p = 0; p < w.kernel_h; ++p)
          for (int q = 0; q < w.kernel_w; ++q) {
            const int yy = i * w.stride_h + p - w.pad_top, xx = j * w.stride_w + q - w.pad_left;
            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
            const double v = x[(c * H + yy) * W + xx];
            sum += v;
            best = std::max(best, v);
            ++inside;
          }
        double out = best;
        if (n.op == OpType::AvgPool) out = sum / (n.count_include_pad ? w.kernel_h * w.kernel_w : inside);
        y[(c * OH + i) * OW + j] = out;
      }
  return y;
}

// Runs a one-node model on the CPU for `batch` random samples and checks every sample against
// `naive(sample pointer)`.
template <typename Naive>
void check_single_op(const std::shared_ptr<formats::Model>& model, int batch, uint32_t seed, float lo, float hi,
                     Naive naive, const std::string& what) {
  const int64_t in_elements = formats::element_count(model->input.raw_shape);
  const auto input = testing_support::random_floats(size_t(in_elements) * batch, seed, lo, hi);
  const auto out = testing_support::run_backend(model, "reference", input.data(), batch, batch + 3);
  ASSERT_EQ(out.size(), 1u);
  const size_t per_sample = out[0].size() / size_t(batch);
  for (int s = 0; s < batch; ++s) {
    const std::vector<double> want = naive(input.data() + s * in_elements);
    const std::vector<float> got(out[0].begin() + s * per_sample, out[0].begin() + (s + 1) * per_sample);
    expect_close(got, want, what + " batch " + std::to_string(batch) + " sample " + std::to_string(s));
  }
}

struct ConvCase {
  int C, H, W, O;
  Window2D win;
  bool bias;
};

TEST(CpuOps, Conv2D) {
  const ConvCase cases[] = {
      {1, 5, 5, 1, window(3, 3, 1, 1), true},
      {1, 32, 32, 6, window(5, 5, 1, 1), true},                 // LeNet C1
      {6, 14, 14, 16, window(5, 5, 1, 1), false},               // LeNet C3, no bias
      {3, 7, 9, 4, window(3, 2, 2, 1, 1, 0, 1, 1), true},       // stride 2, asymmetric padding
      {2, 11, 6, 3, window(5, 5, 2, 2, 2, 2, 2, 2), true},      // odd sizes, stride 2 both ways
      {4, 4, 4, 2, window(4, 4, 3, 3, 3, 0, 0, 3), true},       // padding only top and right
      {2, 9, 9, 5, window(1, 1, 2, 2), true},                   // 1x1, stride 2
      {3, 8, 8, 2, window(4, 4, 1, 1, 1, 2, 1, 2), true},       // Keras 'same' with an even kernel
  };
  uint32_t seed = 10;
  for (const auto& c : cases) {
    formats::Node attrs;
    attrs.out_channels = c.O;
    attrs.window = c.win;
    auto model = testing_support::single_op_model(OpType::Conv2D, {c.C, c.H, c.W}, attrs, seed++, c.bias);
    const formats::Node& node = model->nodes.at(0);
    for (int batch : kBatches)
      check_single_op(model, batch, seed++, -1, 1,
                      [&](const float* x) { return naive_conv(x, c.C, c.H, c.W, node); },
                      "conv2d " + formats::shape_to_string({c.C, c.H, c.W}) + " -> " +
                          formats::shape_to_string(node.output_shape));
  }
}

struct PoolCase {
  int C, H, W;
  Window2D win;
};

TEST(CpuOps, AvgPoolAndMaxPool) {
  const PoolCase cases[] = {
      {6, 28, 28, window(2, 2, 2, 2)},                  // LeNet S2
      {2, 7, 6, window(3, 3, 2, 2, 1, 1, 1, 1)},        // padded, odd size
      {3, 9, 5, window(3, 2, 1, 2, 2, 0, 1, 1)},        // asymmetric padding, mixed strides
      {1, 3, 4, window(5, 5, 1, 1, 4, 4, 4, 4)},        // windows mostly padding
      {4, 5, 5, window(2, 3, 3, 1)},                    // windows that skip rows
  };
  uint32_t seed = 100;
  for (const auto& c : cases) {
    for (OpType op : {OpType::AvgPool, OpType::MaxPool}) {
      for (bool include_pad : {true, false}) {
        if (op == OpType::MaxPool && !include_pad) continue;  // not a maxpool attribute
        formats::Node attrs;
        attrs.window = c.win;
        attrs.count_include_pad = include_pad;
        auto model = testing_support::single_op_model(op, {c.C, c.H, c.W}, attrs, seed++);
        const formats::Node& node = model->nodes.at(0);
        for (int batch : kBatches)
          check_single_op(model, batch, seed++, -3, 1,  // mostly negative: a padded zero must not win a max
                          [&](const float* x) { return naive_pool(x, c.C, c.H, c.W, node); },
                          std::string(formats::op_name(op)) + (include_pad ? " include_pad " : " exclude_pad ") +
                              formats::shape_to_string({c.C, c.H, c.W}));
      }
    }
  }
}

TEST(CpuOps, CountIncludePadChangesOnlyTheBorder) {
  // 1x3x3 of ones, 3x3 window, padding 1, stride 1: corner sees 4 real positions.
  for (bool include_pad : {true, false}) {
    formats::Node attrs;
    attrs.window = window(3, 3, 1, 1, 1, 1, 1, 1);
    attrs.count_include_pad = include_pad;
    auto model = testing_support::single_op_model(OpType::AvgPool, {1, 3, 3}, attrs, 1);
    const std::vector<float> ones(9, 1.0f);
    const auto out = testing_support::run_backend(model, "reference", ones.data(), 1, 1);
    EXPECT_FLOAT_EQ(out[0][0], include_pad ? 4.0f / 9.0f : 1.0f);
    EXPECT_FLOAT_EQ(out[0][4], 1.0f);
  }
}

TEST(CpuOps, Activations) {
  const formats::Shape shapes[] = {{3, 5, 7}, {1}, {100}};
  uint32_t seed = 200;
  for (const auto& shape : shapes) {
    const int64_t n = formats::element_count(shape);
    auto unary = [&](OpType op, auto f) {
      auto model = testing_support::single_op_model(op, shape, formats::Node{}, seed++);
      for (int batch : kBatches)
        check_single_op(model, batch, seed++, -30, 30,  // saturating tanh and sigmoid too
                        [&](const float* x) {
                          std::vector<double> y(n);
                          for (int64_t i = 0; i < n; ++i) y[i] = f(double(x[i]));
                          return y;
                        },
                        std::string(formats::op_name(op)) + " " + formats::shape_to_string(shape));
    };
    unary(OpType::Relu, [](double v) { return v > 0 ? v : 0.0; });
    unary(OpType::Tanh, [](double v) { return std::tanh(v); });
    unary(OpType::Sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
    unary(OpType::Flatten, [](double v) { return v; });
    unary(OpType::Add, [](double v) { return v + v; });  // add(x, x)
  }
}

TEST(CpuOps, Dense) {
  const int sizes[][2] = {{1, 1}, {7, 13}, {400, 120}, {84, 10}};
  uint32_t seed = 300;
  for (const auto& size : sizes) {
    const int k = size[0], units = size[1];  // not a structured binding: clang 14 cannot capture those
    for (bool bias : {true, false}) {
      formats::Node attrs;
      attrs.units = units;
      auto model = testing_support::single_op_model(OpType::Dense, {k}, attrs, seed++, bias);
      const formats::Node& node = model->nodes.at(0);
      for (int batch : kBatches)
        check_single_op(model, batch, seed++, -1, 1,
                        [&](const float* x) {
                          std::vector<double> y(units);
                          for (int u = 0; u < units; ++u) {
                            double acc = node.bias ? node.bias->values[u] : 0.0;
                            for (int i = 0; i < k; ++i) acc += double(node.weight->values[u * k + i]) * x[i];
                            y[u] = acc;
                          }
                          return y;
                        },
                        "dense " + std::to_string(k) + " -> " + std::to_string(units));
    }
  }
}

TEST(CpuOps, Softmax) {
  const int sizes[] = {1, 10, 37};
  uint32_t seed = 400;
  for (int k : sizes) {
    auto model = testing_support::single_op_model(OpType::Softmax, {k}, formats::Node{}, seed++);
    // Inputs near 1000: exp would overflow without subtracting the maximum first.
    for (auto [lo, hi] : {std::pair{-5.0f, 5.0f}, std::pair{990.0f, 1000.0f}})
      for (int batch : kBatches)
        check_single_op(model, batch, seed++, lo, hi,
                        [&](const float* x) {
                          double m = x[0];
                          for (int i = 1; i < k; ++i) m = std::max(m, double(x[i]));
                          double sum = 0;
                          for (int i = 0; i < k; ++i) sum += std::exp(x[i] - m);
                          std::vector<double> y(k);
                          for (int i = 0; i < k; ++i) y[i] = std::exp(x[i] - m) / sum;
                          return y;
                        },
                        "softmax " + std::to_string(k) + " inputs in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + ")");
  }
}

TEST(CpuOps, AddOfTwoDistinctValues) {
  auto model = testing_support::add_dag_model({2, 3, 5});
  for (int batch : kBatches)
    check_single_op(model, batch, 500, -2, 2,
                    [&](const float* x) {
                      std::vector<double> y(30);
                      for (int i = 0; i < 30; ++i) y[i] = float(x[i] > 0 ? x[i] : 0.0f) + float(std::tanh(double(x[i])));
                      return y;
                    },
                    "add(relu(x), tanh(x))");
}

// y[c, i] = x[c, i] * scale[c] + shift[c], channels = the first dimension, whatever the rank.
TEST(CpuOps, ScaleShift) {
  const formats::Shape shapes[] = {{3, 5, 7}, {1}, {100}, {17, 1, 1}, {2, 19}, {1, 9, 4}};
  uint32_t seed = 600;
  for (const auto& shape : shapes) {
    auto model = testing_support::single_op_model(OpType::ScaleShift, shape, formats::Node{}, seed++);
    const formats::Node& node = model->nodes.at(0);
    const int64_t channels = shape[0], inner = formats::element_count(shape) / channels;
    for (int batch : kBatches)
      check_single_op(model, batch, seed++, -3, 3,
                      [&](const float* x) {
                        std::vector<double> y(size_t(channels * inner));
                        for (int64_t c = 0; c < channels; ++c)
                          for (int64_t i = 0; i < inner; ++i)
                            y[size_t(c * inner + i)] = double(x[c * inner + i]) * node.weight->values[size_t(c)] +
                                                       node.bias->values[size_t(c)];
                        return y;
                      },
                      "scale_shift " + formats::shape_to_string(shape));
  }
}

// concat(concat(relu(x), x, tanh(x)), sigmoid(x)): each input's values in its slice, in order.
TEST(CpuOps, ConcatAlongTheFirstDimension) {
  const formats::Shape shapes[] = {{2, 3, 5}, {1}, {7}, {3, 1, 4}};
  uint32_t seed = 700;
  for (const auto& shape : shapes) {
    auto model = testing_support::concat_dag_model(shape);
    const int64_t n = formats::element_count(shape);
    EXPECT_EQ(model->nodes.back().output_shape[0], 4 * shape[0]);
    for (int batch : kBatches)
      check_single_op(model, batch, seed++, -3, 3,
                      [&](const float* x) {
                        std::vector<double> y(size_t(4 * n));
                        for (int64_t i = 0; i < n; ++i) {
                          y[size_t(i)] = x[i] > 0 ? x[i] : 0.0;
                          y[size_t(n + i)] = x[i];
                          y[size_t(2 * n + i)] = std::tanh(double(x[i]));
                          y[size_t(3 * n + i)] = 1.0 / (1.0 + std::exp(-double(x[i])));
                        }
                        return y;
                      },
                      "concat " + formats::shape_to_string(shape));
    // concat(x, x): the same value twice.
    auto twice = testing_support::single_op_model(OpType::Concat, shape, formats::Node{}, seed++);
    check_single_op(twice, 5, seed++, -3, 3,
                    [&](const float* x) {
                      std::vector<double> y(size_t(2 * n));
                      for (int64_t i = 0; i < n; ++i) y[size_t(i)] = y[size_t(n + i)] = x[i];
                      return y;
                    },
                    "concat(x, x) " + formats::shape_to_string(shape));
  }
}

TEST(CpuOps, Uint8PreprocessingIsExactlyTheSpecFormula) {
  formats::Preprocess p;
  p.scale = 0.003921568859368563f;
  p.mean = {0.485f, 0.456f, 0.406f};
  p.std = {0.229f, 0.224f, 0.225f};
  p.pad_top = 2, p.pad_bottom = 1, p.pad_left = 0, p.pad_right = 3;
  p.pad_value = -0.5f;
  auto model = testing_support::ModelBuilder("pre", {1})
                   .uint8_input({3, 5, 4}, p)
                   .unary("y", OpType::Flatten, "x")  // the output is the preprocessed input itself
                   .outputs({"y"})
                   .build();
  ASSERT_EQ(model->input.shape, (formats::Shape{3, 8, 7}));
  for (int batch : kBatches) {
    const auto pixels = testing_support::random_bytes(size_t(60) * batch, 600 + batch);
    const auto out = testing_support::run_backend(model, "reference", pixels.data(), batch, batch);
    ASSERT_EQ(out[0].size(), size_t(3 * 8 * 7) * batch);
    for (int s = 0; s < batch; ++s)
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 8; ++y)
          for (int x = 0; x < 7; ++x) {
            float want = p.pad_value;
            const int sy = y - p.pad_top, sx = x - p.pad_left;
            if (sy >= 0 && sy < 5 && sx >= 0 && sx < 4) {
              // volatile: each step rounds to float, as the spec's float32 arithmetic does.
              volatile float scaled = float(pixels[((s * 3 + c) * 5 + sy) * 4 + sx]) * p.scale;
              volatile float centred = scaled - p.mean[c];
              want = centred / p.std[c];
            }
            const float got = out[0][((size_t(s) * 3 + c) * 8 + y) * 7 + x];
            ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
                << "sample " << s << " c " << c << " y " << y << " x " << x << ": " << got << " vs " << want;
          }
  }
}

TEST(CpuOps, RunRejectsBadBatchSizes) {
  auto model = testing_support::single_op_model(OpType::Relu, {4}, formats::Node{}, 1);
  const std::vector<float> input(4 * 5, 1.0f);
  EXPECT_THROW(testing_support::run_backend(model, "reference", input.data(), 5, 4), std::invalid_argument);
  EXPECT_NO_THROW(testing_support::run_backend(model, "reference", input.data(), 4, 4));
}

}  // namespace

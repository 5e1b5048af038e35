#pragma once
// Models built in code for op-level tests: a float32 input of any shape, one op (or a small DAG),
// random parameters from a seed. Every model goes through formats::validate_model, like a file.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/model.hpp"

namespace testing_support {

// Input value is named "x"; the op's node is named "y" and is the only output. The op's attributes
// (window, out_channels, units, count_include_pad) come from `attrs_template`. conv2d and dense get
// the template's weight/bias when it has them (shapes as the op needs), otherwise random ones
// scaled by 1/sqrt(fan-in) so activations stay near 1; `with_bias` = false leaves the bias out.
// `add` and `concat` read "x" twice. scale_shift gets the template's weight (scale) and bias
// (shift) when it has them, otherwise random ones, one per channel (the input's first dimension):
// scales in [-2, 2), shifts in [-1, 1).
std::shared_ptr<formats::Model> single_op_model(formats::OpType op, const formats::Shape& input_shape,
                                                const formats::Node& attrs_template, uint32_t seed,
                                                bool with_bias = true);
// y = add(relu(x), tanh(x)): `add` with two distinct inputs and a value ("x") used twice.
std::shared_ptr<formats::Model> add_dag_model(const formats::Shape& input_shape);
// y = concat(concat(relu(x), x, tanh(x)), sigmoid(x)) along the first dimension: inputs of
// different sizes (3C and C), the graph input read directly, a concat of a concat.
std::shared_ptr<formats::Model> concat_dag_model(const formats::Shape& input_shape);
// The committed LeNet-5 (ENGINE_SOURCE_DIR/models/lenet5.json), or nullptr when that file does not
// exist yet; a file that exists but does not load throws. Use ENGINE_LOAD_LENET5_OR_SKIP in tests.
std::shared_ptr<formats::Model> lenet5_model();
std::string lenet5_path();

std::vector<float> random_floats(size_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// Random pixels 0..255, for uint8-input models.
std::vector<uint8_t> random_bytes(size_t count, uint32_t seed);

}  // namespace testing_support

// In a test body: `ENGINE_LOAD_LENET5_OR_SKIP(model);` declares `model` or skips the test.
#define ENGINE_LOAD_LENET5_OR_SKIP(var)                                                      \
  auto var = ::testing_support::lenet5_model();                                              \
  if (!var) GTEST_SKIP() << ::testing_support::lenet5_path() << " does not exist yet"

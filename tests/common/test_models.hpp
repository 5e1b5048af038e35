#pragma once
// Models built in code for op-level tests: a float32 input of any shape, one op (or a small DAG),
// random parameters from a seed. Every model goes through formats::validate_model, like a file.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "formats/model.hpp"

namespace testing_support {

// Input value is named "x"; the op's node is named "y" and is the only output.
std::shared_ptr<formats::Model> single_op_model(formats::OpType op, const formats::Shape& input_shape,
                                                const formats::Node& attrs_template, uint32_t seed);
// add(relu(x), tanh(x)) style DAG to test `add` with two distinct inputs and a value used twice.
std::shared_ptr<formats::Model> add_dag_model(const formats::Shape& input_shape);
// The committed LeNet-5 (models/lenet5.json).
std::shared_ptr<formats::Model> lenet5_model();

std::vector<float> random_floats(size_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace testing_support

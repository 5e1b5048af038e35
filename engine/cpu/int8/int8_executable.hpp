#pragma once
// The cpu backend's int8 path (--precision int8): the reference backend's int8 emulation
// (engine/reference/reduced_precision.hpp) computed with int8 products. Each conv2d and dense reads
// its input quantized per tensor with the model's calibrated range, q = clamp(rne(x / s), -127, 127),
// s = range / 127, and its weights quantized per output channel, s_o = max |w_o| / 127; the int32
// sum of q * q_w (exact) becomes float(sum * (s * s_o) + bias) in double; everything else (pooling,
// activations, add, scale_shift, concat, softmax) is computed in float exactly as the reference
// computes it. Values are stored NHWC between nodes (a convolution's im2col rows are then runs of
// channels); a dense layer after a flatten reads its weights permuted to match.
#include <memory>

#include "engine/core/backend.hpp"
#include "engine/cpu/int8/int8_gemm.hpp"
#include "engine/cpu/program.hpp"

namespace engine::cpu::int8 {

// Throws std::invalid_argument for a model without calibration, or whose calibration lacks the
// range of a conv2d's or dense's input (the reference's messages). `preprocess` is the fp32 kernel
// set's uint8 preprocessing (bitwise the reference's values, vectorised).
using PreprocessFn = void (*)(const Preprocess& p, const uint8_t* raw, float* out);
std::unique_ptr<Executable> make_int8_executable(const Graph& graph, const CompileOptions& options, const Int8Gemm& gemm,
                                                 PreprocessFn preprocess);

}  // namespace engine::cpu::int8

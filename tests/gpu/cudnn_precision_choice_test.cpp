// A reduced precision as a permission (engine/gpu/precision_choice.hpp): the choice logic on injected
// timings, no GPU needed. The backend's own choice on LeNet-5 in int8: CudnnInt8.Lenet5OnMnist.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/gpu/precision_choice.hpp"

namespace {

using engine::Precision;

TEST(CudnnPrecisionChoice, AllowedPrecisionsNarrowestFirst) {
  using V = std::vector<Precision>;
  EXPECT_EQ(engine::gpu::allowed_precisions(Precision::INT8), (V{Precision::INT8, Precision::FP16, Precision::FP32}));
  EXPECT_EQ(engine::gpu::allowed_precisions(Precision::FP16), (V{Precision::FP16, Precision::FP32}));
  EXPECT_EQ(engine::gpu::allowed_precisions(Precision::BF16), (V{Precision::BF16, Precision::FP32}));
  EXPECT_EQ(engine::gpu::allowed_precisions(Precision::FP32), (V{Precision::FP32}));
  EXPECT_EQ(engine::gpu::allowed_precisions(Precision::TF32), (V{Precision::TF32}));
}

TEST(CudnnPrecisionChoice, FastestWinsATieGoesToTheNarrower) {
  using engine::gpu::choose_precision;
  const auto slow_int8 = choose_precision(
      Precision::INT8, {{Precision::INT8, 2.0}, {Precision::FP16, 0.5}, {Precision::FP32, 1.0}}, 65536);
  EXPECT_EQ(slow_int8.chosen, 1u);
  EXPECT_NE(slow_int8.note.find("precision: int8 asked, fp16 runs (int8 allows it; the fastest forward pass at "
                                "batch 65536: int8 2 ms, fp16 0.5 ms, fp32 1 ms"),
            std::string::npos)
      << slow_int8.note;
  const auto fast_int8 = choose_precision(
      Precision::INT8, {{Precision::INT8, 0.25}, {Precision::FP16, 0.5}, {Precision::FP32, 1.0}}, 1024);
  EXPECT_EQ(fast_int8.chosen, 0u);
  EXPECT_NE(fast_int8.note.find("int8 runs (as asked"), std::string::npos) << fast_int8.note;
  EXPECT_EQ(choose_precision(Precision::FP16, {{Precision::FP16, 1.0}, {Precision::FP32, 1.0}}, 1).chosen, 0u);
  EXPECT_EQ(choose_precision(Precision::FP16, {{Precision::FP16, 1.0}, {Precision::FP32, 0.999}}, 1).chosen, 1u);
  EXPECT_EQ(choose_precision(Precision::FP16, {{Precision::FP16, 1.0}}, 1).chosen, 0u);
  EXPECT_THROW(choose_precision(Precision::FP16, {}, 1), std::logic_error);
}

}  // namespace

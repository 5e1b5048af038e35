// The default backend's choice on a GPU (engine/api/backend_choice.hpp): both GPU backends timed on
// the first call, the measurement read back from the cache on the second, and a GPU backend chosen.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/api/backend_choice.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"

namespace {

TEST(CudnnBackendChoice, MeasuresOnceThenReadsTheCache) {
  ENGINE_SKIP_UNLESS_BACKEND("cudnn");
  testing_support::ModelBuilder b("choice_mlp", {64});
  b.dense("d1", "x", 64, 48, 7).unary("r1", formats::OpType::Relu, "d1").dense("d2", "r1", 48, 10, 9);
  const auto model = b.outputs({"d2"}).build();
  const auto dir = std::filesystem::temp_directory_path() / "cudnn-backend-choice-test";
  std::filesystem::remove_all(dir);
  const engine::api::BackendChoiceCache cache(dir / "backend-choice.tsv");

  auto first = engine::api::choose_default_backend(model, engine::Precision::FP32, 256, 0, cache);
  ASSERT_TRUE(first.backend);
  EXPECT_FALSE(first.backend->devices().empty()) << first.reason;
  EXPECT_NE(first.reason.find("measured now"), std::string::npos) << first.reason;
  EXPECT_TRUE(std::filesystem::exists(cache.file()));

  auto second = engine::api::choose_default_backend(model, engine::Precision::FP32, 256, 0, cache);
  EXPECT_EQ(second.backend->name(), first.backend->name());
  EXPECT_NE(second.reason.find("measured earlier"), std::string::npos) << second.reason;
  std::filesystem::remove_all(dir);
}

}  // namespace

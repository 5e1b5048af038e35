// The default backend's choice (engine/api/backend_choice.hpp) with the device facts injected: the
// measured images/s, the refusals, the cache file; and the real registry on a machine without a GPU.
#include "engine/api/backend_choice.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/common/model_builder.hpp"

namespace {

using engine::Precision;
using engine::api::BackendCandidate;
using engine::api::BackendChoiceCache;
using engine::api::choose_backend;

std::vector<BackendCandidate> three(std::optional<std::string> custom_refusal = {},
                                    std::optional<std::string> cudnn_refusal = {},
                                    std::optional<std::string> cpu_refusal = {}) {
  return {{"reference", 0, false, std::nullopt},
          {"cpu", 5, false, cpu_refusal},
          {"cudnn", 10, true, cudnn_refusal},
          {"custom", 20, true, custom_refusal}};
}

TEST(BackendChoice, FastestMeasuredGpuBackendWins) {
  auto c = choose_backend(three(), {{"custom", 20.5e6}, {"cudnn", 61.6e6}}, "measured now", Precision::FP32);
  EXPECT_EQ(c.name, "cudnn");
  EXPECT_NE(c.reason.find("fastest for this model at fp32"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("cudnn 6.16e+07 images/s"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("measured now"), std::string::npos) << c.reason;
  c = choose_backend(three(), {{"custom", 22.7e6}, {"cudnn", 10.0e6}}, "cached", Precision::FP32);
  EXPECT_EQ(c.name, "custom");
}

TEST(BackendChoice, WithoutMeasurementsThePriorityDecides) {
  const auto c = choose_backend(three(), {}, "", Precision::FP32);
  EXPECT_EQ(c.name, "custom");
  EXPECT_NE(c.reason.find("no measurement"), std::string::npos) << c.reason;
}

TEST(BackendChoice, Int8GoesToAGpuBackendThatComputesIt) {
  // cpu refuses int8; with one GPU backend left it needs no measurement.
  const auto c = choose_backend(three({}, "node 'x': unsupported", "does not compute int8"), {}, "", Precision::INT8);
  EXPECT_EQ(c.name, "custom");
  EXPECT_NE(c.reason.find("the only GPU backend that runs this model at int8"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("cudnn: node 'x': unsupported"), std::string::npos) << c.reason;
  // Both GPU backends compute it: the measurement decides, cpu never enters.
  EXPECT_EQ(choose_backend(three({}, {}, "does not compute int8"), {{"custom", 1.0}, {"cudnn", 2.0}}, "m",
                           Precision::INT8)
                .name,
            "cudnn");
}

TEST(BackendChoice, NoGpuGivesTheBestHostBackend) {
  const auto c = choose_backend(three("no CUDA device", "no CUDA device"), {}, "", Precision::FP32);
  EXPECT_EQ(c.name, "cpu");
  EXPECT_NE(c.reason.find("not usable: cudnn: no CUDA device; custom: no CUDA device"), std::string::npos)
      << c.reason;
}

TEST(BackendChoice, NothingUsableIsOneErrorNamingEveryRefusal) {
  auto candidates = three("no CUDA device", "no CUDA device", "does not compute int8");
  candidates[0].refusal = "does not compute int8";
  try {
    choose_backend(candidates, {}, "", Precision::INT8);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no backend can run this model at int8"), std::string::npos) << m;
    for (const char* name : {"reference: ", "cpu: ", "cudnn: ", "custom: "}) EXPECT_NE(m.find(name), std::string::npos) << m;
  }
}

class BackendChoiceCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("backend-choice-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(BackendChoiceCacheTest, StoresFindsAndReplaces) {
  const BackendChoiceCache cache(dir_ / "cnn-engine" / "backend-choice.tsv");
  EXPECT_FALSE(cache.find("k1"));
  ASSERT_TRUE(cache.store("k1", {{"cudnn", 6.1e7}, {"custom", 2.05e7}}));
  ASSERT_TRUE(cache.store("k2", {{"cudnn", 1.0}}));
  auto got = cache.find("k1");
  ASSERT_TRUE(got);
  EXPECT_DOUBLE_EQ(got->at("cudnn"), 6.1e7);
  EXPECT_DOUBLE_EQ(got->at("custom"), 2.05e7);
  ASSERT_TRUE(cache.store("k1", {{"custom", 3.0}}));  // replaces k1, keeps k2
  got = cache.find("k1");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->size(), 1u);
  EXPECT_DOUBLE_EQ(got->at("custom"), 3.0);
  EXPECT_TRUE(cache.find("k2"));
  EXPECT_FALSE(cache.find("k"));  // a prefix of a key is not the key
}

TEST_F(BackendChoiceCacheTest, MalformedLinesAreIgnored) {
  std::filesystem::create_directories(dir_);
  const auto file = dir_ / "backend-choice.tsv";
  std::ofstream(file) << "k1\tcudnn=abc\nk2\t=5\nk3\tcudnn=-1\nk4\nk5\tcudnn=7,custom=8\n\xff\xfe garbage\n";
  const BackendChoiceCache cache(file);
  for (const char* k : {"k1", "k2", "k3", "k4"}) EXPECT_FALSE(cache.find(k)) << k;
  const auto got = cache.find("k5");
  ASSERT_TRUE(got);
  EXPECT_DOUBLE_EQ(got->at("custom"), 8.0);
}

TEST_F(BackendChoiceCacheTest, UnwritableOrEmptyPathLeavesTheChoiceUncached) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  EXPECT_FALSE(BackendChoiceCache(dir_ / "file" / "sub" / "backend-choice.tsv").store("k", {{"cudnn", 1.0}}));
  EXPECT_FALSE(BackendChoiceCache({}).store("k", {{"cudnn", 1.0}}));
  EXPECT_FALSE(BackendChoiceCache({}).find("k"));
}

TEST(BackendChoiceCacheFile, FollowsXdgCacheHome) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(BackendChoiceCache::default_file(), std::filesystem::path("/tmp/xdg-test/cnn-engine/backend-choice.tsv"));
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
}

std::shared_ptr<formats::Model> small_mlp(int hidden) {
  testing_support::ModelBuilder b("mlp", {20});
  b.dense("d1", "x", 20, hidden, 1).unary("r1", formats::OpType::Relu, "d1").dense("d2", "r1", hidden, 10, 3);
  return b.outputs({"d2"}).build();
}

TEST(BackendChoiceKey, NamesGraphGpuPrecisionAndBatch) {
  const auto m = small_mlp(16);
  const std::string k = engine::api::backend_choice_key(*m, "NVIDIA H200", Precision::FP32, 1024);
  EXPECT_EQ(k, engine::api::backend_choice_key(*m, "NVIDIA H200", Precision::FP32, 1024));
  EXPECT_NE(k, engine::api::backend_choice_key(*m, "NVIDIA H100", Precision::FP32, 1024));
  EXPECT_NE(k, engine::api::backend_choice_key(*m, "NVIDIA H200", Precision::FP16, 1024));
  EXPECT_NE(k, engine::api::backend_choice_key(*m, "NVIDIA H200", Precision::FP32, 65536));
  EXPECT_NE(k, engine::api::backend_choice_key(*small_mlp(17), "NVIDIA H200", Precision::FP32, 1024));
  EXPECT_EQ(k.find('\t'), std::string::npos);
}

// The real registry: with no GPU here, fp32 goes to cpu; int8 on a model without calibration has no
// backend, and the message says why for each.
TEST(BackendChoiceRegistry, ChoosesOnThisMachine) {
  const auto m = small_mlp(8);
  const BackendChoiceCache no_cache({});
  auto chosen = engine::api::choose_default_backend(m, Precision::FP32, 64, 0, no_cache);
  ASSERT_TRUE(chosen.backend);
  EXPECT_FALSE(chosen.reason.empty());
  if (chosen.backend->devices().empty()) {
    EXPECT_EQ(chosen.backend->name(), "cpu") << chosen.reason;
    try {
      engine::api::choose_default_backend(m, Precision::INT8, 64, 0, no_cache);
      FAIL() << "int8 without a GPU and without calibration has no backend";
    } catch (const std::invalid_argument& e) {
      // The cpu backend computes int8 (engine/cpu/int8), given calibration.
      EXPECT_NE(std::string(e.what()).find("cpu: the model has no calibration data"), std::string::npos) << e.what();
    }
  }
}

}  // namespace

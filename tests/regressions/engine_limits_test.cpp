// Plan-time limits (engine/core/graph.hpp): a model that follows every rule of the format can still
// ask for absurd work or memory with a few hundred bytes of JSON (a weight-free pooling window of
// 4096 × 4096 with padding just under it). Planning must refuse it with a clear message before a
// backend allocates or computes anything; before the limits, `engine run` on such a model computed
// for days or allocated gigabytes per thread.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/model_loader.hpp"
#include "formats/safetensors.hpp"
#include "formats/sha256.hpp"

namespace {
namespace fs = std::filesystem;

class PlanLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device seed;
    dir_ = fs::temp_directory_path() / ("engine_plan_limits_" + std::to_string(seed()));
    fs::create_directories(dir_);
    formats::write_safetensors((dir_ / "w.safetensors").string(), {});
    sha_ = formats::sha256_file_hex((dir_ / "w.safetensors").string());
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::shared_ptr<const formats::Model> load(const std::string& input, const std::string& nodes,
                                             const std::string& output) {
    const std::string path = (dir_ / "m.json").string();
    std::ofstream(path) << R"({"format":"cnn-engine-model","version":1,"name":"absurd",
      "weights":{"file":"w.safetensors","sha256":")" << sha_ << R"("},"input":)" << input
                        << R"(,"nodes":)" << nodes << R"(,"outputs":[")" << output << R"("]})";
    return std::make_shared<const formats::Model>(formats::load_model(path));
  }
  void expect_refused(const std::shared_ptr<const formats::Model>& model, const std::string& part) {
    try {
      engine::plan_graph(model);
      ADD_FAILURE() << "planned a model that should be refused";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("absurd"), std::string::npos) << "names the model: " << error.what();
    }
  }
  fs::path dir_;
  std::string sha_;
};

const char* kMnistInput = R"({"name":"image","dtype":"uint8","shape":[1,28,28],
                              "preprocess":{"scale":1.0,"mean":[0.0],"std":[1.0]}})";

TEST_F(PlanLimits, HugePoolingWindowIsRefusedForItsWork) {
  // Output 4123 × 4123 (17 million floats: within the format), each the maximum of 16.7 million.
  auto model = load(kMnistInput, R"([{"name":"p","op":"maxpool","inputs":["image"],
      "attrs":{"kernel":[4096,4096],"stride":[1,1],"padding":[4095,4095,4095,4095]}}])", "p");
  expect_refused(model, "multiply-adds");
}

TEST_F(PlanLimits, WindowOfTwoTo31IsRefused) {
  // 46339 × 46339 outputs (just under the format's 2^31 - 1), each the maximum of 46340 × 46340
  // inputs: 4.6e18 multiply-adds.
  auto model = load(R"({"name":"x","dtype":"float32","shape":[1,1,1]})",
                    R"([{"name":"p","op":"maxpool","inputs":["x"],"attrs":{"kernel":[46340,46340],
                        "stride":[1,1],"padding":[46339,46339,46339,46339]}}])", "p");
  expect_refused(model, "multiply-adds");
}

TEST_F(PlanLimits, ActivationsOverAGibibytePerSampleAreRefused) {
  // 2^28 floats in, 2^28 out: 2 GiB of activations for every sample.
  auto model = load(R"({"name":"x","dtype":"uint8","shape":[1,16384,16384],
                        "preprocess":{"scale":1.0,"mean":[0.0],"std":[1.0]}})",
                    R"([{"name":"r","op":"relu","inputs":["x"]}])", "r");
  expect_refused(model, "per sample");
}

TEST_F(PlanLimits, OrdinaryModelsPlan) {
  auto model = load(kMnistInput, R"([{"name":"p","op":"maxpool","inputs":["image"],"attrs":{"kernel":[2,2]}},
      {"name":"f","op":"flatten","inputs":["p"]},{"name":"s","op":"softmax","inputs":["f"]}])", "s");
  const engine::Graph graph = engine::plan_graph(model);
  EXPECT_LT(graph.arena_floats_per_sample, engine::kMaxArenaFloatsPerSample);
}

// Windows of up to 2^31 - 1 with padding just under them are within the format. The backends index
// windows with 32-bit ints: the CPU backend's `i * stride - pad` and `height - top` overflowed
// (undefined behaviour: UBSan aborted; the custom CUDA kernels could read out of bounds) and
// avgpool's divisor kh * kw overflowed. Planning now refuses a padded side or a window area over
// 2^31 - 1, and the CPU backend computes windows in 64 bits.
TEST_F(PlanLimits, WindowArithmeticBeyond32BitsIsRefused) {
  auto tall = load(R"({"name":"x","dtype":"float32","shape":[1,2,1]})",
                   R"([{"name":"p","op":"maxpool","inputs":["x"],"attrs":{"kernel":[2147483647,1],
                       "stride":[1,1],"padding":[2147483646,0,0,0]}}])", "p");
  expect_refused(tall, "padded input 2147483648x1");
  auto wide = load(R"({"name":"x","dtype":"float32","shape":[1,1,1]})",
                   R"([{"name":"a","op":"avgpool","inputs":["x"],"attrs":{"kernel":[65536,65536],
                       "stride":[1,1],"padding":[65535,0,65535,0],"count_include_pad":true}}])", "a");
  expect_refused(wide, "65536x65536 window");
}

TEST_F(PlanLimits, HugeWindowsOverATinyInputComputeExactly) {
  // Both CPU backends; the fast one divides in float (kernels.hpp), so its avgpool may differ from
  // the reference's double division in the last bit.
  auto run_on = [](const char* backend, const std::shared_ptr<const formats::Model>& model,
                   const std::vector<float>& input) {
    const engine::Graph graph = engine::plan_graph(model);
    engine::CompileOptions options;
    options.max_batch = 1;
    auto exe = engine::BackendRegistry::instance().create(backend)->compile(graph, options);
    std::vector<float> out(size_t(graph.output_elements(0)), -1.0f);
    float* outputs[] = {out.data()};
    exe->run(input.data(), 1, outputs);
    return out;
  };
  // maxpool over a column of 2, padded to 2^31 - 1 rows: row 0 sees only x0, row 1 x0 and x1.
  auto column = load(R"({"name":"x","dtype":"float32","shape":[1,2,1]})",
                     R"([{"name":"p","op":"maxpool","inputs":["x"],"attrs":{"kernel":[2147483646,1],
                         "stride":[1,1],"padding":[2147483645,0,0,0]}}])", "p");
  auto run_cpu = [&](const std::shared_ptr<const formats::Model>& model, const std::vector<float>& input) {
    return run_on("reference", model, input);
  };
  EXPECT_EQ(run_cpu(column, {3.0f, 5.0f}), (std::vector<float>{3.0f, 5.0f}));
  EXPECT_EQ(run_on("cpu", column, {3.0f, 5.0f}), (std::vector<float>{3.0f, 5.0f}));
  // avgpool 46340 × 46340 (just under 2^31 positions) over one pixel: x / 46340² when padding
  // counts, x when it does not.
  for (bool count_pad : {true, false}) {
    auto pixel = load(R"({"name":"x","dtype":"float32","shape":[1,1,1]})",
                      std::string(R"([{"name":"a","op":"avgpool","inputs":["x"],"attrs":{"kernel":[46340,46340],
                          "stride":[1,1],"padding":[46339,0,46339,0],"count_include_pad":)") +
                          (count_pad ? "true" : "false") + "}}]",
                      "a");
    const float expected = count_pad ? float(8.0 / (46340.0 * 46340.0)) : 8.0f;
    EXPECT_EQ(run_cpu(pixel, {8.0f}), (std::vector<float>{expected}));
    const std::vector<float> fast = run_on("cpu", pixel, {8.0f});
    ASSERT_EQ(fast.size(), 1u);
    EXPECT_FLOAT_EQ(fast[0], expected);
  }
}

}  // namespace

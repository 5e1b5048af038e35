#pragma once
// Helpers for the formats tests: a temporary folder per test, files written byte for byte, a
// tiny valid model (graph JSON + safetensors) to corrupt, and the FormatError expectation.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "formats/safetensors.hpp"

namespace formats_test {

using Json = nlohmann::ordered_json;
using Bytes = std::vector<uint8_t>;

// A fresh folder under the system temp dir, removed with the fixture.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

void write_bytes(const std::string& path, const Bytes& bytes);
void write_text(const std::string& path, const std::string& text);
Bytes read_bytes(const std::string& path);
Bytes to_bytes(const std::string& text);

// Safetensors file from a header text and a data buffer, exactly as given (no validation).
Bytes raw_safetensors(const std::string& header, const Bytes& data);

// input uint8 [1, 8, 8] padded to 12×12 → conv c1 (2 channels, 3×3) → relu r1 → maxpool p1 (2×2)
// → flatten f1 → dense d1 (3 units) → softmax prob. Labels "a", "b", "c".
struct TinyModel {
  Json graph;
  std::vector<formats::TensorToWrite> tensors;
  std::map<std::string, std::string> metadata;
  bool fix_sha256 = true;  // fill weights.sha256 with the written file's digest

  TinyModel();
  Json& node(const std::string& name);  // throws if absent
  formats::TensorToWrite& tensor(const std::string& name);
  // Writes NAME.safetensors and NAME.json into `dir`; returns the graph path.
  std::string write(const std::filesystem::path& dir, const std::string& name = "tiny") ;
};

std::vector<float> ramp(size_t count, float step = 0.01f);

// Runs `action`, which must throw formats::FormatError for `file` whose message contains every
// one of `parts`.
void expect_format_error(const std::function<void()>& action, const std::string& file,
                         const std::vector<std::string>& parts);

// Real data locations (tests/CMakeLists.txt); "" when absent, so the test can GTEST_SKIP.
std::string mnist_file(const std::string& name);  // ENGINE_TEST_DATA_DIR/mnist/NAME

}  // namespace formats_test

#define EXPECT_FORMAT_ERROR(statement, file, ...) \
  ::formats_test::expect_format_error([&] { statement; }, file, {__VA_ARGS__})

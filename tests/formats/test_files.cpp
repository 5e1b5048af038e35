#include "test_files.hpp"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <stdexcept>

#include "formats/sha256.hpp"

namespace formats_test {

void TempDirTest::SetUp() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::random_device seed;
  dir_ = std::filesystem::temp_directory_path() /
         ("formats_test_" + std::string(info->name()) + "_" + std::to_string(seed()) + "_" +
          std::to_string(counter++));
  std::filesystem::create_directories(dir_);
}

void TempDirTest::TearDown() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_text(const std::string& path, const std::string& text) { write_bytes(path, to_bytes(text)); }

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

Bytes to_bytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

Bytes raw_safetensors(const std::string& header, const Bytes& data) {
  // Sized once and filled in place: GCC 12 at -O3 flags growing an 8-byte vector with insert() as
  // reading past those 8 bytes (-Wstringop-overread, a false positive on the reallocation path).
  Bytes bytes(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  const auto after_header = std::copy(header.begin(), header.end(), bytes.begin() + 8);
  std::copy(data.begin(), data.end(), after_header);
  return bytes;
}

std::vector<float> ramp(size_t count, float step) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = step * static_cast<float>(i) - 0.5f;
  return values;
}

TinyModel::TinyModel() {
  graph = Json::parse(R"({
    "format": "cnn-engine-model",
    "version": 1,
    "name": "tiny",
    "description": "a tiny test model",
    "weights": {"file": "tiny.safetensors", "sha256": ""},
    "input": {"name": "image", "dtype": "uint8", "shape": [1, 8, 8],
              "preprocess": {"scale": 0.003921568859368563, "mean": [0.5], "std": [0.25],
                             "pad": [2, 2, 2, 2], "pad_value": -2.0}},
    "labels": ["a", "b", "c"],
    "nodes": [
      {"name": "c1", "op": "conv2d", "inputs": ["image"],
       "attrs": {"kernel": [3, 3], "stride": [1, 1], "padding": [0, 0, 0, 0], "out_channels": 2},
       "tensors": {"weight": "c1.weight", "bias": "c1.bias"}},
      {"name": "r1", "op": "relu", "inputs": ["c1"]},
      {"name": "p1", "op": "maxpool", "inputs": ["r1"], "attrs": {"kernel": [2, 2]}},
      {"name": "f1", "op": "flatten", "inputs": ["p1"]},
      {"name": "d1", "op": "dense", "inputs": ["f1"], "attrs": {"units": 3},
       "tensors": {"weight": "d1.weight", "bias": "d1.bias"}},
      {"name": "prob", "op": "softmax", "inputs": ["d1"]}
    ],
    "outputs": ["prob"]
  })");
  tensors = {formats::f32_tensor("c1.weight", {2, 1, 3, 3}, ramp(18)),
             formats::f32_tensor("c1.bias", {2}, {0.25f, -0.25f}),
             formats::f32_tensor("d1.weight", {3, 50}, ramp(150, 0.001f)),
             formats::f32_tensor("d1.bias", {3}, {1.0f, 2.0f, 3.0f})};
  metadata = {{"producer", "formats_tests"}};
}

Json& TinyModel::node(const std::string& name) {
  for (Json& node : graph["nodes"]) {
    if (node["name"] == name) return node;
  }
  throw std::runtime_error("TinyModel has no node " + name);
}

formats::TensorToWrite& TinyModel::tensor(const std::string& name) {
  for (formats::TensorToWrite& tensor : tensors) {
    if (tensor.name == name) return tensor;
  }
  throw std::runtime_error("TinyModel has no tensor " + name);
}

std::string TinyModel::write(const std::filesystem::path& dir, const std::string& name) {
  const std::string weights = (dir / (name + ".safetensors")).string();
  formats::write_safetensors(weights, tensors, metadata);
  // Only a well-formed weights object is completed; tests that break it keep it broken.
  const auto entry = graph.find("weights");
  if (entry != graph.end() && entry->is_object()) {
    Json& w = *entry;
    if (w.contains("file") && w["file"] == "tiny.safetensors") w["file"] = name + ".safetensors";
    if (fix_sha256 && w.contains("sha256")) w["sha256"] = formats::sha256_hex(read_bytes(weights));
  }
  const std::string graph_path = (dir / (name + ".json")).string();
  write_text(graph_path, graph.dump(2));
  return graph_path;
}

void expect_format_error(const std::function<void()>& action, const std::string& file,
                         const std::vector<std::string>& parts) {
  try {
    action();
  } catch (const formats::FormatError& e) {
    EXPECT_EQ(e.file(), file) << e.what();
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(file + ": ", 0), 0u) << "message must start with the file: " << message;
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "expected \"" << part << "\" in the message: " << message;
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected formats::FormatError, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected formats::FormatError for " << file << ", nothing was thrown";
}

std::string mnist_file(const std::string& name) {
  const std::filesystem::path path = std::filesystem::path(ENGINE_TEST_DATA_DIR) / "mnist" / name;
  return std::filesystem::exists(path) ? path.string() : "";
}

}  // namespace formats_test

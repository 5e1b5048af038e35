#include "tests/cli/tiny_files.hpp"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "formats/sha256.hpp"

namespace cli_test {
namespace {

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void put_u32_be(std::vector<uint8_t>& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(uint8_t(v >> shift));
}

void put_floats_le(std::vector<uint8_t>& b, const std::vector<float>& values) {
  for (float f : values) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int shift = 0; shift < 32; shift += 8) b.push_back(uint8_t(u >> shift));
  }
}

}  // namespace

std::string write_tiny_model(const std::string& dir, bool float_input, const std::string& last) {
  std::vector<float> weight(3 * 16, 0.0f), bias{0.0f, 0.0f, 0.0f};
  for (int k = 0; k < 3; ++k) weight[k * 16 + k] = 10.0f;

  nlohmann::ordered_json header;
  header["d.weight"] = {{"dtype", "F32"}, {"shape", {3, 16}}, {"data_offsets", {0, 192}}};
  header["d.bias"] = {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {192, 204}}};
  const std::string header_text = header.dump();
  std::vector<uint8_t> st;
  for (int i = 0; i < 8; ++i) st.push_back(uint8_t(uint64_t(header_text.size()) >> (8 * i)));
  st.insert(st.end(), header_text.begin(), header_text.end());
  put_floats_le(st, weight);
  put_floats_le(st, bias);
  write_bytes(dir + "/tiny.safetensors", st);

  nlohmann::ordered_json graph;
  graph["format"] = "cnn-engine-model";
  graph["version"] = 1;
  graph["name"] = float_input ? "tiny-float" : "tiny";
  graph["weights"] = {{"file", "tiny.safetensors"}, {"sha256", formats::sha256_hex(st)}};
  if (float_input)
    graph["input"] = {{"name", "image"}, {"dtype", "float32"}, {"shape", {16}}};
  else
    graph["input"] = {{"name", "image"},
                      {"dtype", "uint8"},
                      {"shape", {1, 4, 4}},
                      {"preprocess", {{"scale", 1.0 / 255.0}, {"mean", {0.0}}, {"std", {1.0}}}}};
  graph["labels"] = {"zero", "one", "two"};
  graph["nodes"] = nlohmann::ordered_json::array({
      {{"name", "f"}, {"op", "flatten"}, {"inputs", {"image"}}},
      {{"name", "d"},
       {"op", "dense"},
       {"inputs", {"f"}},
       {"attrs", {{"units", 3}}},
       {"tensors", {{"weight", "d.weight"}, {"bias", "d.bias"}}}},
  });
  if (!last.empty()) graph["nodes"].push_back({{"name", "prob"}, {"op", last}, {"inputs", {"d"}}});
  graph["outputs"] = {last.empty() ? "d" : "prob"};
  const std::string suffix = last == "softmax" ? "" : "-" + (last.empty() ? std::string("logits") : last);
  const std::string path = dir + (float_input ? "/tiny-float" : "/tiny") + suffix + ".json";
  const std::string text = graph.dump(2);
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
  return path;
}

std::vector<uint8_t> tiny_images(int count, int height, int width) {
  std::vector<uint8_t> pixels(size_t(count) * height * width, 0);
  for (int i = 0; i < count; ++i) pixels[size_t(i) * height * width + size_t(i % 3)] = 255;
  return pixels;
}

void write_idx_images(const std::string& path, const std::vector<uint8_t>& pixels, int count, int height, int width) {
  std::vector<uint8_t> b;
  put_u32_be(b, 0x00000803);
  put_u32_be(b, uint32_t(count));
  put_u32_be(b, uint32_t(height));
  put_u32_be(b, uint32_t(width));
  b.insert(b.end(), pixels.begin(), pixels.end());
  write_bytes(path, b);
}

void write_idx_floats(const std::string& path, const std::vector<float>& values, const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> b;
  put_u32_be(b, 0x00000D00 | uint32_t(dims.size()));
  for (uint32_t d : dims) put_u32_be(b, d);
  for (float f : values) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    put_u32_be(b, u);  // IDX is big-endian throughout
  }
  write_bytes(path, b);
}

void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  put_u32_be(b, 0x00000801);
  put_u32_be(b, uint32_t(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  write_bytes(path, b);
}

void write_pgm(const std::string& path, const uint8_t* pixels, int height, int width) {
  const std::string head = "P5\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  std::vector<uint8_t> b(head.begin(), head.end());
  b.insert(b.end(), pixels, pixels + size_t(height) * width);
  write_bytes(path, b);
}

}  // namespace cli_test

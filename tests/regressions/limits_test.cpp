// The limits that stop a small hostile file from exhausting memory or time (formats/README.md,
// formats/safetensors.md, formats/model-format-v1.md). Each test feeds a file that breaks one limit
// and expects a FormatError that says so, before anything of the claimed size is allocated: the
// files here are tiny or sparse, and the sanitizer build would report an allocation of the
// claimed size (allocator_may_return_null=0, or an RSS far beyond the test's).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "formats/error.hpp"
#include "formats/idx.hpp"
#include "formats/image.hpp"
#include "formats/model_checks.hpp"
#include "formats/model_loader.hpp"
#include "formats/safetensors.hpp"
#include "formats/sha256.hpp"
#include "formats/strict_json.hpp"

namespace {
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

class Limits : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device seed;
    dir_ = fs::temp_directory_path() / ("engine_limits_" + std::to_string(seed()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const Bytes& bytes) const {
    std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good());
    return path(name);
  }
  std::string write(const std::string& name, const std::string& text) const {
    return write(name, Bytes(text.begin(), text.end()));
  }
  // A file of `size` bytes that starts with `head` and takes no disk space (a hole).
  std::string sparse(const std::string& name, const Bytes& head, uint64_t size) const {
    const std::string p = write(name, head);
    fs::resize_file(p, size);
    return p;
  }
  fs::path dir_;
};

// `action` must throw a FormatError for `file` whose message contains every part, quickly.
void expect_error(const std::function<void()>& action, const std::string& file,
                  const std::vector<std::string>& parts) {
  const auto start = std::chrono::steady_clock::now();
  try {
    action();
    ADD_FAILURE() << "no FormatError for " << file;
  } catch (const formats::FormatError& error) {
    EXPECT_EQ(error.file(), file);
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << error.what();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0) << "rejecting " << file << " took too long";
}

Bytes u32_be(std::initializer_list<uint32_t> values) {
  Bytes bytes;
  for (uint32_t v : values) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(v >> shift));
  }
  return bytes;
}

Bytes safetensors(const std::string& header, const Bytes& data = {}) {
  Bytes bytes(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  std::copy(header.begin(), header.end(), bytes.begin() + 8);
  std::copy(data.begin(), data.end(), bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return bytes;
}

Bytes gzip(const Bytes& data, int level = 9) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, level, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&stream, static_cast<uLong>(data.size())));
  stream.next_in = const_cast<Bytef*>(data.data());
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

// ---- sizes of whole files: checked on the file's size, before reading it

TEST_F(Limits, GraphFileOver16MiB) {
  const std::string graph = sparse("big.json", Bytes{'{'}, (uint64_t{16} << 20) + 1);
  expect_error([&] { formats::load_model(graph); }, graph, {"16 MiB"});
}

TEST_F(Limits, SafetensorsFileOver4GiB) {
  const std::string file = sparse("big.safetensors", Bytes(8, 0), formats::kMaxSafetensorsFileBytes + 1);
  expect_error([&] { formats::read_safetensors(file); }, file, {"4 GiB"});
}

TEST_F(Limits, IdxFileOver1GiB) {
  const std::string file = sparse("big-images-idx3-ubyte", u32_be({0x803, 1, 1, 1}), formats::kMaxIdxBytes + 1);
  expect_error([&] { formats::read_idx_images(file); }, file, {"1 GiB"});
  expect_error([&] { formats::read_images(file); }, file, {"1 GiB"});
  const std::string floats = sparse("big-floats.idx", u32_be({0xD02, 1, 1}), formats::kMaxIdxBytes + 1);
  expect_error([&] { formats::read_idx_floats(floats); }, floats, {"1 GiB"});
}

TEST_F(Limits, ImageFileOver64MiB) {
  const Bytes png_signature{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  const std::string file = sparse("big.png", png_signature, formats::kMaxImageFileBytes + 1);
  expect_error([&] { formats::read_image_file(file); }, file, {"64 MiB"});
  expect_error([&] { formats::read_images(file); }, file, {"64 MiB"});
}

// ---- safetensors: header length, tensor shapes

TEST_F(Limits, SafetensorsHeaderLengthOverLimit) {
  Bytes bytes(16, ' ');
  const uint64_t length = formats::kMaxSafetensorsHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(length >> (8 * i));
  const std::string file = write("header.safetensors", bytes);
  expect_error([&] { formats::read_safetensors(file); }, file, {"header length", "limit"});
}

TEST_F(Limits, SafetensorsHeaderLengthOfTwoTo64Minus1) {
  Bytes bytes(16, 0xFF);
  const std::string file = write("header.safetensors", bytes);
  expect_error([&] { formats::read_safetensors(file); }, file, {"header length"});
}

TEST_F(Limits, SafetensorsHeaderLengthPastTheEndOfTheFile) {
  Bytes bytes = safetensors("{}");
  bytes[0] = 200;  // 200 bytes of header claimed, 2 present
  const std::string file = write("short.safetensors", bytes);
  expect_error([&] { formats::read_safetensors(file); }, file, {"past the end"});
}

TEST_F(Limits, SafetensorsShapeProductOverflows) {
  const std::string file = write(
      "overflow.safetensors",
      safetensors(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})"));
  expect_error([&] { formats::read_safetensors(file); }, file, {"64 bits"});
}

TEST_F(Limits, SafetensorsByteCountOverflows) {
  // 2^62 elements fit in 64 bits; 2^62 × 4 bytes do not.
  const std::string file = write(
      "overflow.safetensors",
      safetensors(R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})"));
  expect_error([&] { formats::read_safetensors(file); }, file, {"64 bits"});
}

TEST_F(Limits, SafetensorsHugeTensorAgainstASmallFile) {
  // Offsets consistent with the shape, data absent: rejected by the tiling rule, nothing allocated.
  const std::string file = write(
      "huge.safetensors",
      safetensors(R"({"t":{"dtype":"F32","shape":[1073741824],"data_offsets":[0,4294967296]}})"));
  expect_error([&] { formats::read_safetensors(file); }, file, {"past its end"});
}

TEST_F(Limits, JsonNestingDepth) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  expect_error([&] { formats::parse_strict_json(deep, "deep.json", "graph file"); }, "deep.json",
               {"levels deep"});
  const std::string file = write("deep.safetensors", safetensors(std::string(5000, '[') + std::string(5000, ']')));
  expect_error([&] { formats::read_safetensors(file); }, file, {"levels deep"});
}

// ---- IDX: headers that claim more than the file holds

TEST_F(Limits, IdxHeaderClaimingBillionsOfImages) {
  Bytes bytes = u32_be({0x803, 4000000000u, 28, 28});
  bytes.resize(bytes.size() + 784, 7);  // one image present
  const std::string file = write("claim-images-idx3-ubyte", bytes);
  expect_error([&] { formats::read_idx_images(file); }, file, {"4000000000 images", "truncated"});
}

TEST_F(Limits, IdxHeaderWhoseSizeOverflows64Bits) {
  const std::string file = write("overflow-images-idx3-ubyte", u32_be({0x803, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}));
  expect_error([&] { formats::read_idx_images(file); }, file, {"more than 2^64"});
}

TEST_F(Limits, IdxLabelsClaimingBillions) {
  const std::string file = write("claim-labels-idx1-ubyte", u32_be({0x801, 4000000000u}));
  expect_error([&] { formats::read_idx_labels(file); }, file, {"truncated"});
}

TEST_F(Limits, GzipClaimingBillionsOfImages) {
  Bytes raw = u32_be({0x803, 4000000000u, 28, 28});
  raw.resize(raw.size() + 784, 0);
  const std::string file = write("claim-images-idx3-ubyte.gz", gzip(raw));
  expect_error([&] { formats::read_idx_images(file); }, file, {"4000000000 images", "decompressed"});
}

TEST_F(Limits, GzipDecompressionBomb) {
  // 1 GiB + 1 MiB of zeros compress to about 1 MiB; decompression stops at the 1 GiB limit.
  z_stream stream{};
  ASSERT_EQ(deflateInit2(&stream, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  const Bytes zeros(1 << 20, 0);
  Bytes out(1 << 20);
  Bytes compressed;
  const uint64_t chunks = (formats::kMaxIdxBytes >> 20) + 1;
  for (uint64_t i = 0; i < chunks; ++i) {
    stream.next_in = const_cast<Bytef*>(zeros.data());
    stream.avail_in = static_cast<uInt>(zeros.size());
    const int flush = i + 1 == chunks ? Z_FINISH : Z_NO_FLUSH;
    do {
      stream.next_out = out.data();
      stream.avail_out = static_cast<uInt>(out.size());
      deflate(&stream, flush);
      compressed.insert(compressed.end(), out.data(), out.data() + (out.size() - stream.avail_out));
    } while (stream.avail_out == 0);
  }
  deflateEnd(&stream);
  ASSERT_LT(compressed.size(), 4u << 20);
  const std::string file = write("bomb-images-idx3-ubyte.gz", compressed);
  expect_error([&] { formats::read_idx_images(file); }, file, {"gzip", "1 GiB"});
}

// ---- images: sides

TEST_F(Limits, PgmSideOverLimit) {
  const std::string file = write("wide.pgm", "P5 16385 1 255\n" + std::string(16385, 'x'));
  expect_error([&] { formats::read_image_file(file); }, file, {"16384"});
}

TEST_F(Limits, PgmHugeHeaderAgainstASmallFile) {
  const std::string file = write("huge.pgm", std::string("P5 16384 16384 65535\n"));
  expect_error([&] { formats::read_image_file(file); }, file, {"truncated"});
  const std::string plain = write("huge-plain.pgm", std::string("P2 16384 16384 255\n0 1"));
  expect_error([&] { formats::read_image_file(plain); }, plain, {"PGM"});
}

TEST_F(Limits, ProgressiveJpegWithTooManyScans) {
  // 28 KB: a 1024×1024 progressive JPEG whose last scan (12 bytes) is repeated 2000 times; each
  // scan is decoded over the whole image. Stopped at scan 1001 (a 4096×4096 one at about 380).
  const std::string file = std::string(ENGINE_SOURCE_DIR) + "/tests/regressions/image/progressive-jpeg-2000-scans.jpg";
  expect_error([&] { formats::read_image_file(file); }, file, {"too many scans", "1001 scans"});
}

TEST_F(Limits, PngSideOverLimit) {
  // A PNG whose IHDR says 100000 × 1 (the decoder must stop at the header).
  auto crc_chunk = [](Bytes& png, const char* type, const Bytes& data) {
    for (int shift = 24; shift >= 0; shift -= 8) png.push_back(static_cast<uint8_t>(data.size() >> shift));
    Bytes body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    png.insert(png.end(), body.begin(), body.end());
    const uLong crc = crc32(0, body.data(), static_cast<uInt>(body.size()));
    for (int shift = 24; shift >= 0; shift -= 8) png.push_back(static_cast<uint8_t>(crc >> shift));
  };
  Bytes png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Bytes ihdr = u32_be({100000, 1});
  ihdr.insert(ihdr.end(), {8, 0, 0, 0, 0});  // 8-bit gray
  crc_chunk(png, "IHDR", ihdr);
  const Bytes row(100001, 0);
  Bytes idat;
  {
    uLongf size = compressBound(static_cast<uLong>(row.size()));
    idat.resize(size);
    compress(idat.data(), &size, row.data(), static_cast<uLong>(row.size()));
    idat.resize(size);
  }
  crc_chunk(png, "IDAT", idat);
  crc_chunk(png, "IEND", {});
  const std::string file = write("wide.png", png);
  expect_error([&] { formats::read_image_file(file); }, file, {"PNG"});
}

// ---- the model: per-sample size and dimension products

std::string graph_with_input_shape(const std::string& shape, const std::string& sha) {
  return R"({"format":"cnn-engine-model","version":1,"name":"m",
    "weights":{"file":"m.safetensors","sha256":")" + sha + R"("},
    "input":{"name":"x","dtype":"float32","shape":)" + shape + R"(},
    "nodes":[{"name":"y","op":"relu","inputs":["x"]}],"outputs":["y"]})";
}

TEST_F(Limits, ModelInputDimensionProductOverflows) {
  const Bytes weights = safetensors("{}");
  write("m.safetensors", weights);
  const std::string sha = formats::sha256_hex(weights);
  const std::string graph = write("m.json", graph_with_input_shape("[4294967296, 4294967296, 4294967296]", sha));
  expect_error([&] { formats::load_model(graph); }, graph, {"elements per sample"});
}

TEST_F(Limits, ModelValueOverTwoTo31Elements) {
  const Bytes weights = safetensors("{}");
  write("m.safetensors", weights);
  const std::string sha = formats::sha256_hex(weights);
  const std::string graph = write("m.json", graph_with_input_shape("[2, 32768, 32768]", sha));
  expect_error([&] { formats::load_model(graph); }, graph, {"2147483647"});
}

TEST_F(Limits, ModelPoolingThatGrowsPastTheLimit) {
  // Weight-free ops can still grow a value: padding just under the kernel on each side.
  const Bytes weights = safetensors("{}");
  write("m.safetensors", weights);
  const std::string graph = write("m.json", R"({"format":"cnn-engine-model","version":1,"name":"m",
    "weights":{"file":"m.safetensors","sha256":")" + formats::sha256_hex(weights) + R"("},
    "input":{"name":"x","dtype":"float32","shape":[1,1,1]},
    "nodes":[{"name":"p","op":"maxpool","inputs":["x"],
              "attrs":{"kernel":[65536,65536],"stride":[1,1],"padding":[65535,65535,65535,65535]}}],
    "outputs":["p"]})");
  expect_error([&] { formats::load_model(graph); }, graph, {"2147483647"});
}

}  // namespace

namespace {

TEST_F(Limits, JsonObjectWithTooManyKeys) {
  // Parsing keeps keys in file order, each insertion scanning those before it: unbounded, a 100 MB
  // header of tiny keys would take hours. The reader stops at key 4097.
  std::string header = "{";
  for (size_t i = 0; i <= formats::kMaxJsonObjectKeys; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  header += "}";
  const std::string file = write("many.safetensors", safetensors(header));
  expect_error([&] { formats::read_safetensors(file); }, file, {"more than 4096 keys"});

  // 4096 keys (4095 tensors and __metadata__) are still fine.
  std::string ok = "{\"__metadata__\":{}";
  for (size_t i = 1; i < formats::kMaxJsonObjectKeys; ++i) {
    ok += ",\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  ok += "}";
  const std::string ok_file = write("ok.safetensors", safetensors(ok));
  EXPECT_EQ(formats::read_safetensors(ok_file).tensors.size(), formats::kMaxJsonObjectKeys - 1);
}

TEST_F(Limits, GraphWithTooManyNodes) {
  const Bytes weights = safetensors("{}");
  write("m.safetensors", weights);
  std::string nodes = R"({"name":"n0","op":"relu","inputs":["x"]})";
  for (size_t i = 1; i <= formats::kMaxNodes; ++i) {
    nodes += R"(,{"name":"n)" + std::to_string(i) + R"(","op":"relu","inputs":["n)" + std::to_string(i - 1) + "\"]}";
  }
  const std::string graph = write("m.json", R"({"format":"cnn-engine-model","version":1,"name":"m",
    "weights":{"file":"m.safetensors","sha256":")" + formats::sha256_hex(weights) + R"("},
    "input":{"name":"x","dtype":"float32","shape":[4]},
    "nodes":[)" + nodes + R"(],"outputs":["n4096"]})");
  expect_error([&] { formats::load_model(graph); }, graph, {"4097 nodes", "4096"});
}

}  // namespace

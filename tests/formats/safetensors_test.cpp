// Safetensors reader: every rule of formats/safetensors.md with a file breaking it, and the
// writer's round trip.
#include <gtest/gtest.h>

#include <filesystem>

#include "formats/safetensors.hpp"
#include "test_files.hpp"

namespace {

using formats::DType;
using formats_test::Bytes;
using formats_test::raw_safetensors;

class SafetensorsTest : public formats_test::TempDirTest {
 protected:
  std::string write(const Bytes& bytes) {
    const std::string file = path("w.safetensors");
    formats_test::write_bytes(file, bytes);
    return file;
  }
  // A file with this header and `data_size` zero bytes of data.
  void expect_header_error(const std::string& header, size_t data_size,
                           const std::vector<std::string>& parts) {
    const std::string file = write(raw_safetensors(header, Bytes(data_size, 0)));
    formats_test::expect_format_error([&] { formats::read_safetensors(file); }, file, parts);
  }
  void expect_accepted(const std::string& header, size_t data_size) {
    const std::string file = write(raw_safetensors(header, Bytes(data_size, 0)));
    EXPECT_NO_THROW(formats::read_safetensors(file)) << header;
  }
};

TEST_F(SafetensorsTest, RoundTripEveryDtypeScalarsAndEmptyTensors) {
  std::vector<formats::TensorToWrite> tensors;
  const DType all[] = {DType::BOOL, DType::U8,  DType::I8,  DType::U16, DType::I16,
                       DType::F16,  DType::BF16, DType::U32, DType::I32, DType::F32,
                       DType::U64,  DType::I64, DType::F64};
  for (DType dtype : all) {
    const size_t size = formats::dtype_size(dtype);
    Bytes bytes(2 * 3 * size);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + size);
    tensors.push_back({std::string("t_") + formats::dtype_name(dtype), dtype, {2, 3}, bytes});
  }
  tensors.push_back(formats::f32_tensor("scalar", {}, {3.5f}));
  tensors.push_back(formats::f32_tensor("empty", {4, 0}, {}));
  tensors.push_back(formats::f32_tensor("values", {2, 2}, {1.0f, -2.5f, 1e-30f, 65504.0f}));
  const std::string file = path("all.safetensors");
  formats::write_safetensors(file, tensors, {{"producer", "test"}, {"note", "é"}});

  const formats::SafetensorsFile read = formats::read_safetensors(file);
  EXPECT_EQ(read.path, file);
  EXPECT_EQ(read.metadata, (std::map<std::string, std::string>{{"producer", "test"}, {"note", "é"}}));
  EXPECT_EQ(read.data_start % 8, 0u) << "the writer pads the header to 8 bytes";
  ASSERT_EQ(read.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    const formats::SafetensorsTensor& t = read.tensors[i];
    EXPECT_EQ(t.name, tensors[i].name) << "header order is kept";
    EXPECT_EQ(t.dtype, tensors[i].dtype);
    EXPECT_EQ(t.shape, tensors[i].shape);
    const auto data = read.data(t);
    EXPECT_EQ(Bytes(data.begin(), data.end()), tensors[i].bytes);
  }
  EXPECT_EQ(read.find("scalar")->element_count, 1u);
  EXPECT_EQ(read.find("empty")->element_count, 0u);
  EXPECT_EQ(read.to_floats(*read.find("values")), (std::vector<float>{1.0f, -2.5f, 1e-30f, 65504.0f}));
  EXPECT_EQ(read.find("nope"), nullptr);
  EXPECT_FORMAT_ERROR(read.to_floats(*read.find("t_F64")), file, "tensor 't_F64' has dtype F64, expected F32");
}

TEST_F(SafetensorsTest, DtypeNamesAndSizes) {
  EXPECT_EQ(formats::dtype_from_name("BF16"), DType::BF16);
  EXPECT_FALSE(formats::dtype_from_name("f32"));
  EXPECT_EQ(formats::dtype_size(DType::F64), 8u);
  EXPECT_EQ(formats::dtype_size(DType::BOOL), 1u);
  EXPECT_STREQ(formats::dtype_name(DType::I16), "I16");
}

TEST_F(SafetensorsTest, WriterLeavesNoTemporaryFileAndRejectsBadInput) {
  const std::string file = path("w.safetensors");
  formats::write_safetensors(file, {formats::f32_tensor("a", {1}, {1.0f})});
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "w.safetensors");
  }
  EXPECT_EQ(entries, 1);
  EXPECT_FORMAT_ERROR(formats::write_safetensors(path("x.safetensors"), {formats::f32_tensor("a", {2}, {1.0f})}),
                      path("x.safetensors"), "tensor 'a' has 4 bytes, but F32 [2] needs 8");
  EXPECT_FORMAT_ERROR(formats::write_safetensors(path("x.safetensors"),
                                                 {formats::f32_tensor("a", {1}, {1.0f}),
                                                  formats::f32_tensor("a", {1}, {1.0f})}),
                      path("x.safetensors"), "cannot write tensor 'a' twice");
  EXPECT_FALSE(std::filesystem::exists(path("x.safetensors")));
  EXPECT_FORMAT_ERROR(formats::write_safetensors(path("missing/dir/x.safetensors"), {}),
                      path("missing/dir/x.safetensors"), "cannot create file");
}

TEST_F(SafetensorsTest, EmptyFileWithNoTensorsIsValid) {
  expect_accepted("{}", 0);
  expect_accepted(R"({"__metadata__": {"a": "b"}})", 0);
  expect_accepted(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})", 0);
}

TEST_F(SafetensorsTest, HeaderPaddedWithSpacesAndOffsetsOutOfHeaderOrder) {
  expect_accepted(R"({"b": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]},)"
                  R"( "a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}}       )",
                  5);
}

// Rule 1
TEST_F(SafetensorsTest, ShorterThan8Bytes) {
  const std::string file = write(Bytes{1, 0, 0, 0});
  EXPECT_FORMAT_ERROR(formats::read_safetensors(file), file,
                      "not a safetensors file: 4 bytes long, shorter than the 8-byte header length");
  const std::string empty = write(Bytes{});
  EXPECT_FORMAT_ERROR(formats::read_safetensors(empty), empty, "0 bytes long");
}

// Rule 2
TEST_F(SafetensorsTest, HeaderLengthOverLimit) {
  Bytes bytes = raw_safetensors("{}", {});
  const uint64_t length = 100'000'001;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(length >> (8 * i));
  const std::string file = write(bytes);
  EXPECT_FORMAT_ERROR(formats::read_safetensors(file), file,
                      "safetensors header length is 100000001 bytes, more than the limit of 100000000");
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  Bytes bytes = raw_safetensors("{}", {});
  bytes[0] = 3;  // claims 3 bytes of header, the file holds 2
  const std::string file = write(bytes);
  EXPECT_FORMAT_ERROR(formats::read_safetensors(file), file,
                      "safetensors header length 3 runs past the end of the file (10 bytes)");
  Bytes huge = raw_safetensors("{}", {});
  for (int i = 0; i < 8; ++i) huge[i] = 0xFF;  // 2^64 - 1: 8 + N must not wrap
  const std::string file2 = write(huge);
  EXPECT_FORMAT_ERROR(formats::read_safetensors(file2), file2, "more than the limit");
}

// Rule 3
TEST_F(SafetensorsTest, HeaderNotUtf8) {
  expect_header_error("{\"caf\xE9\": {}}", 0, {"safetensors header is not valid UTF-8 (byte 0xE9 at offset 5)"});
  expect_header_error("{\"\xED\xA0\x80\": 1}", 0, {"not valid UTF-8"});  // a UTF-16 surrogate
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  expect_header_error("{\"a\": ", 0, {"safetensors header is not valid JSON"});
  expect_header_error(std::string("{}\0\0", 4), 0, {"not valid JSON"});
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  expect_header_error("[]", 0, {"safetensors header must be a JSON object, got array"});
}

TEST_F(SafetensorsTest, DuplicateTensorName) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                      R"( "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                      2, {"safetensors header has the key 'a' twice"});
}

TEST_F(SafetensorsTest, DuplicateKeyInsideAnEntry) {
  expect_header_error(R"({"a": {"dtype": "U8", "dtype": "F32", "shape": [1], "data_offsets": [0, 1]}})", 1,
                      {"has the key 'dtype' twice (inside 'a')"});
}

// Rule 4
TEST_F(SafetensorsTest, MetadataMustBeAnObjectOfStrings) {
  expect_header_error(R"({"__metadata__": "x"})", 0, {"safetensors __metadata__ must be an object of strings, got string"});
  expect_header_error(R"({"__metadata__": {"epochs": 10}})", 0,
                      {"safetensors __metadata__ value of 'epochs' must be a string, got number"});
}

// Rule 5
TEST_F(SafetensorsTest, EntryMustBeAnObjectWithExactlyThreeKeys) {
  expect_header_error(R"({"a": [1, 2]})", 0, {"tensor 'a': entry must be an object with keys dtype, shape, data_offsets, got array"});
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "extra": 1}})", 1,
                      {"tensor 'a': unexpected key 'extra'"});
  expect_header_error(R"({"a": {"dtype": "U8", "data_offsets": [0, 1]}})", 1, {"tensor 'a': missing key 'shape'"});
}

// Rule 6
TEST_F(SafetensorsTest, UnknownDtype) {
  expect_header_error(R"({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", 1,
                      {"tensor 'a': unknown dtype 'F8_E4M3' (expected one of BOOL, U8, I8"});
  expect_header_error(R"({"a": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 4,
                      {"tensor 'a': dtype must be a string"});
}

// Rule 7
TEST_F(SafetensorsTest, ShapeMustBeNonNegativeIntegers) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}})", 0,
                      {"tensor 'a': shape must be an array of non-negative integers, got -1"});
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})", 1,
                      {"shape must be an array of non-negative integers, got 1.5"});
  expect_header_error(R"({"a": {"dtype": "U8", "shape": 3, "data_offsets": [0, 3]}})", 3,
                      {"shape must be an array of non-negative integers, got number"});
}

TEST_F(SafetensorsTest, ShapeElementCountOverflow) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0,
                      {"tensor 'a': shape [4294967296, 4294967296] has more elements than fit in 64 bits"});
  expect_header_error(R"({"a": {"dtype": "F64", "shape": [4294967296, 1073741824], "data_offsets": [0, 0]}})", 0,
                      {"shape [4294967296, 1073741824] of F64 has more bytes than fit in 64 bits"});
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 0]}})", 0,
                      {"shape dimension 18446744073709551615 is too large"});
}

// Rule 8
TEST_F(SafetensorsTest, DataOffsetsShape) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", 1,
                      {"tensor 'a': data_offsets must be two non-negative integers [begin, end], got [0]"});
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})", 1,
                      {"data_offsets must be two non-negative integers"});
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": "0:1"}})", 1,
                      {"data_offsets must be two non-negative integers"});
}

TEST_F(SafetensorsTest, DataOffsetsBeginAfterEnd) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [2, 1]}})", 2,
                      {"tensor 'a': data_offsets [2, 1] end before they begin"});
}

TEST_F(SafetensorsTest, DataOffsetsSizeDisagreesWithShape) {
  expect_header_error(R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20,
                      {"tensor 'a': data_offsets [0, 20] hold 20 bytes, but F32 [2, 3] needs 24"});
}

// Rule 9
TEST_F(SafetensorsTest, GapBeforeFirstTensor) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})", 3,
                      {"bytes [0, 1) of the data buffer belong to no tensor (a gap before 'a')"});
}

TEST_F(SafetensorsTest, GapBetweenTensors) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
                      R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})",
                      6, {"bytes [2, 4) of the data buffer belong to no tensor (a gap before 'b')"});
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                      R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
                      4, {"tensors 'a' and 'b' overlap", "'a' ends at byte 4, 'b' begins at byte 2"});
  // The same bytes claimed twice.
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                      R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                      4, {"overlap"});
}

TEST_F(SafetensorsTest, TensorPastEndOfFile) {
  expect_header_error(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12,
                      {"tensor 'a' ends at byte 16 of the data buffer, past its end (12 bytes"});
  // Offsets far beyond the file must be rejected, never followed.
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                      R"( "b": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]},)"
                      R"( "c": {"dtype": "U8", "shape": [3], "data_offsets": [18446744073709551612, 18446744073709551615]}})",
                      2, {"gap before 'c'"});
}

TEST_F(SafetensorsTest, TrailingBytes) {
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 5,
                      {"3 trailing bytes after the last tensor's data"});
  expect_header_error("{}", 7, {"7 trailing bytes after the last tensor's data (the file has no tensors)"});
}

// Rule 10
TEST_F(SafetensorsTest, EmptyTensorName) {
  expect_header_error(R"({"": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", 1,
                      {"safetensors header has a tensor with an empty name"});
}

// Rule 11
TEST_F(SafetensorsTest, AtMost4096Keys) {
  auto header = [](int tensors) {
    std::string text = "{";
    for (int i = 0; i < tensors; ++i) {
      text += (i ? ", " : "") + std::string("\"t") + std::to_string(i) + "\": {\"dtype\": \"U8\", \"shape\": [1], " +
              "\"data_offsets\": [" + std::to_string(i) + ", " + std::to_string(i + 1) + "]}";
    }
    return text + "}";
  };
  expect_accepted(header(4096), 4096);
  expect_header_error(header(4097), 4097, {"safetensors header has an object with more than 4096 keys"});
}

TEST_F(SafetensorsTest, MissingAndDirectoryFiles) {
  EXPECT_FORMAT_ERROR(formats::read_safetensors(path("none.safetensors")), path("none.safetensors"),
                      "safetensors file not found");
  EXPECT_FORMAT_ERROR(formats::read_safetensors(dir_.string()), dir_.string(), "is a directory");
}

}  // namespace

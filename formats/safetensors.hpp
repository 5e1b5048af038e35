#pragma once
// Safetensors files (safetensors.md): a reader that enforces every rule there and never reads
// outside the file, and a writer (tests and tools produce weights with it).
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace formats {

enum class DType { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

const char* dtype_name(DType dtype);  // "F32"
std::optional<DType> dtype_from_name(const std::string& name);
size_t dtype_size(DType dtype);  // bytes per element

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // as stored; [] is a scalar
  uint64_t begin = 0, end = 0;  // [begin, end) relative to the data buffer
  uint64_t element_count = 0;
};

struct SafetensorsFile {
  std::string path;            // for messages
  std::vector<uint8_t> bytes;  // the whole file
  uint64_t data_start = 0;     // 8 + header length
  std::vector<SafetensorsTensor> tensors;  // header order
  std::map<std::string, std::string> metadata;

  const SafetensorsTensor* find(const std::string& name) const;
  // The tensor's bytes (little-endian, row-major); inside `bytes` by construction.
  std::span<const uint8_t> data(const SafetensorsTensor& tensor) const;
  // The tensor's values; throws FormatError when its dtype is not F32.
  std::vector<float> to_floats(const SafetensorsTensor& tensor) const;
};

// Largest file read_safetensors accepts (the whole file is held in memory).
inline constexpr uint64_t kMaxSafetensorsFileBytes = uint64_t{4} << 30;  // 4 GiB
// Rule 2 of safetensors.md.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

SafetensorsFile read_safetensors(const std::string& path);
// Parses bytes already in memory (the model loader hashes them first); `path` names them.
SafetensorsFile parse_safetensors(std::vector<uint8_t> bytes, const std::string& path);

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // element_count(shape) * dtype_size(dtype) bytes, little-endian
};

TensorToWrite f32_tensor(const std::string& name, const std::vector<int64_t>& shape,
                         const std::vector<float>& values);

// Writes tensors in the given order, header padded with spaces to a multiple of 8 bytes. Writes
// a temporary file beside `path` and renames it, so a failure leaves no partial file. Throws
// FormatError(path, ...) on inconsistent input or I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace formats

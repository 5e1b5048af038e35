#include "formats/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <set>
#include <utility>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/strict_json.hpp"

namespace formats {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes{{
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},   {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4}, {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},   {DType::U64, "U64", 8}, {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},
}};

std::string dtype_list() {
  std::string list;
  for (const DTypeInfo& info : kDTypes) list += (list.empty() ? "" : ", ") + std::string(info.name);
  return list;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Non-negative JSON integer (nlohmann stores non-negative literals as unsigned, "-0" as signed).
std::optional<uint64_t> non_negative_integer(const nlohmann::ordered_json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

std::string json_type(const nlohmann::ordered_json& value) { return value.type_name(); }

SafetensorsTensor parse_entry(const std::string& name, const nlohmann::ordered_json& entry,
                              const std::string& path) {
  const std::string where = "tensor '" + name + "': ";
  if (!entry.is_object()) {
    throw FormatError(path, where + "entry must be an object with keys dtype, shape, "
                                    "data_offsets, got " + json_type(entry));
  }
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      throw FormatError(path, where + "unexpected key '" + key +
                                  "' (an entry has exactly dtype, shape, data_offsets)");
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) throw FormatError(path, where + "missing key '" + key + "'");
  }

  SafetensorsTensor tensor;
  tensor.name = name;
  const auto& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    throw FormatError(path, where + "dtype must be a string, got " + json_type(dtype));
  }
  const std::optional<DType> parsed = dtype_from_name(dtype.get<std::string>());
  if (!parsed) {
    throw FormatError(path, where + "unknown dtype '" + dtype.get<std::string>() +
                                "' (expected one of " + dtype_list() + ")");
  }
  tensor.dtype = *parsed;

  const auto& shape = entry["shape"];
  if (!shape.is_array()) {
    throw FormatError(path, where + "shape must be an array of non-negative integers, got " +
                                json_type(shape));
  }
  uint64_t count = 1;
  bool overflow = false;
  for (const auto& dim : shape) {
    const std::optional<uint64_t> value = non_negative_integer(dim);
    if (!value) {
      throw FormatError(path, where + "shape must be an array of non-negative integers, got " +
                                  dim.dump());
    }
    if (*value > static_cast<uint64_t>(INT64_MAX)) {
      throw FormatError(path, where + "shape dimension " + std::to_string(*value) +
                                  " is too large");
    }
    tensor.shape.push_back(static_cast<int64_t>(*value));
    overflow = overflow || __builtin_mul_overflow(count, *value, &count);
  }
  if (overflow) {
    throw FormatError(path, where + "shape " + shape_text(tensor.shape) +
                                " has more elements than fit in 64 bits");
  }
  uint64_t byte_count = 0;
  if (__builtin_mul_overflow(count, dtype_size(tensor.dtype), &byte_count)) {
    throw FormatError(path, where + "shape " + shape_text(tensor.shape) + " of " +
                                dtype_name(tensor.dtype) + " has more bytes than fit in 64 bits");
  }
  tensor.element_count = count;

  const auto& offsets = entry["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = non_negative_integer(offsets[0]);
    end = non_negative_integer(offsets[1]);
  }
  if (!begin || !end) {
    throw FormatError(path, where + "data_offsets must be two non-negative integers [begin, end], "
                                    "got " + offsets.dump());
  }
  if (*begin > *end) {
    throw FormatError(path, where + "data_offsets [" + std::to_string(*begin) + ", " +
                                std::to_string(*end) + "] end before they begin");
  }
  if (*end - *begin != byte_count) {
    throw FormatError(path, where + "data_offsets [" + std::to_string(*begin) + ", " +
                                std::to_string(*end) + "] hold " + std::to_string(*end - *begin) +
                                " bytes, but " + dtype_name(tensor.dtype) + " " +
                                shape_text(tensor.shape) + " needs " + std::to_string(byte_count));
  }
  tensor.begin = *begin;
  tensor.end = *end;
  return tensor;
}

// Rule 9: sorted by begin, the tensors cover [0, data_size) with no gap and no overlap. This is
// also what guarantees every tensor lies inside the file.
void check_tiling(const std::vector<SafetensorsTensor>& tensors, uint64_t data_size,
                  const std::string& path) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(tensors[a].begin, tensors[a].end) < std::pair(tensors[b].begin, tensors[b].end);
  });
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (size_t index : order) {
    const SafetensorsTensor& tensor = tensors[index];
    if (tensor.begin < covered) {
      throw FormatError(path, "tensors '" + previous->name + "' and '" + tensor.name +
                                  "' overlap in the data buffer ('" + previous->name +
                                  "' ends at byte " + std::to_string(covered) + ", '" +
                                  tensor.name + "' begins at byte " +
                                  std::to_string(tensor.begin) + ")");
    }
    if (tensor.begin > covered) {
      throw FormatError(path, "bytes [" + std::to_string(covered) + ", " +
                                  std::to_string(tensor.begin) +
                                  ") of the data buffer belong to no tensor (a gap before '" +
                                  tensor.name + "')");
    }
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered > data_size) {
    throw FormatError(path, "tensor '" + previous->name + "' ends at byte " +
                                std::to_string(covered) + " of the data buffer, past its end (" +
                                std::to_string(data_size) + " bytes: the file is truncated or "
                                "the offsets are wrong)");
  }
  if (covered < data_size) {
    throw FormatError(path, count_of(data_size - covered, "trailing byte") +
                                " after the last tensor's data" +
                                (tensors.empty() ? " (the file has no tensors)" : ""));
  }
}

}  // namespace

const char* dtype_name(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

std::optional<DType> dtype_from_name(const std::string& name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  for (const SafetensorsTensor& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

std::span<const uint8_t> SafetensorsFile::data(const SafetensorsTensor& tensor) const {
  return std::span<const uint8_t>(bytes).subspan(data_start + tensor.begin,
                                                 tensor.end - tensor.begin);
}

std::vector<float> SafetensorsFile::to_floats(const SafetensorsTensor& tensor) const {
  if (tensor.dtype != DType::F32) {
    throw FormatError(path, "tensor '" + tensor.name + "' has dtype " + dtype_name(tensor.dtype) +
                                ", expected F32");
  }
  const std::span<const uint8_t> raw = data(tensor);
  std::vector<float> values(raw.size() / 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t* b = raw.data() + 4 * i;
    const uint32_t bits = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 |
                          uint32_t{b[3]} << 24;  // little-endian on any host
    values[i] = std::bit_cast<float>(bits);
  }
  return values;
}

SafetensorsFile parse_safetensors(std::vector<uint8_t> bytes, const std::string& path) {
  const uint64_t size = bytes.size();
  if (size < 8) {
    throw FormatError(path, "not a safetensors file: " + std::to_string(size) +
                                " bytes long, shorter than the 8-byte header length field");
  }
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  if (header_length > kMaxSafetensorsHeaderBytes) {
    throw FormatError(path, "safetensors header length is " + std::to_string(header_length) +
                                " bytes, more than the limit of " +
                                std::to_string(kMaxSafetensorsHeaderBytes) +
                                " (is this a safetensors file?)");
  }
  if (8 + header_length > size) {
    throw FormatError(path, "safetensors header length " + std::to_string(header_length) +
                                " runs past the end of the file (" + std::to_string(size) +
                                " bytes): the file is truncated or not a safetensors file");
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8, header_length);
  const nlohmann::ordered_json json = parse_strict_json(header, path, "safetensors header");
  if (!json.is_object()) {
    throw FormatError(path, "safetensors header must be a JSON object, got " + json_type(json));
  }

  SafetensorsFile file;
  file.path = path;
  file.data_start = 8 + header_length;
  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        throw FormatError(path, "safetensors __metadata__ must be an object of strings, got " +
                                    json_type(value));
      }
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          throw FormatError(path, "safetensors __metadata__ value of '" + meta_key +
                                      "' must be a string, got " + json_type(meta_value));
        }
        file.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    if (key.empty()) throw FormatError(path, "safetensors header has a tensor with an empty name");
    file.tensors.push_back(parse_entry(key, value, path));
  }
  // Duplicate names were already rejected by the parser (rule 3 and 10).
  check_tiling(file.tensors, size - file.data_start, path);
  file.bytes = std::move(bytes);
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  return parse_safetensors(read_file_bytes(path, kMaxSafetensorsFileBytes, "safetensors file"),
                           path);
}

TensorToWrite f32_tensor(const std::string& name, const std::vector<int64_t>& shape,
                         const std::vector<float>& values) {
  TensorToWrite tensor{name, DType::F32, shape, {}};
  tensor.bytes.resize(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(values[i]);
    for (int k = 0; k < 4; ++k) tensor.bytes[4 * i + k] = static_cast<uint8_t>(bits >> (8 * k));
  }
  return tensor;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) header["__metadata__"][key] = value;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == "__metadata__") {
      throw FormatError(path, "cannot write a tensor named '" + tensor.name + "'");
    }
    if (!names.insert(tensor.name).second) {
      throw FormatError(path, "cannot write tensor '" + tensor.name + "' twice");
    }
    uint64_t count = 1;
    for (int64_t dim : tensor.shape) {
      if (dim < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count)) {
        throw FormatError(path, "tensor '" + tensor.name + "' has an invalid shape " +
                                    shape_text(tensor.shape));
      }
    }
    if (count * dtype_size(tensor.dtype) != tensor.bytes.size()) {
      throw FormatError(path, "tensor '" + tensor.name + "' has " +
                                  std::to_string(tensor.bytes.size()) + " bytes, but " +
                                  dtype_name(tensor.dtype) + " " + shape_text(tensor.shape) +
                                  " needs " + std::to_string(count * dtype_size(tensor.dtype)));
    }
    header[tensor.name] = {{"dtype", dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string text = header.dump();
  // Alignment as the reference writer does it: the data buffer starts at a multiple of 8.
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string temporary = path + ".partial-" + std::to_string(::getpid());
  auto fail = [&](const std::string& problem) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw FormatError(path, problem);
  };
  FILE* out = std::fopen(temporary.c_str(), "wb");
  if (!out) throw FormatError(path, std::string("cannot create file: ") + std::strerror(errno));
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, out) == 8 &&
            std::fwrite(text.data(), 1, text.size(), out) == text.size();
  for (const TensorToWrite& tensor : tensors) {
    ok = ok && (tensor.bytes.empty() ||
                std::fwrite(tensor.bytes.data(), 1, tensor.bytes.size(), out) == tensor.bytes.size());
  }
  const int saved_errno = errno;
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) fail(std::string("cannot write file: ") + std::strerror(saved_errno ? saved_errno : errno));
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) fail("cannot rename the written file into place: " + ec.message());
}

}  // namespace formats

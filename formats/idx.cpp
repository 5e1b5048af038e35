#include "formats/idx.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"

namespace formats {
namespace {

std::string hex_byte(uint8_t byte) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", byte);
  return text;
}

const char* idx_type_name(uint8_t code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

struct IdxContent {
  std::vector<uint32_t> dims;
  size_t header_bytes = 0;
};

// What a reader accepts: images and labels are unsigned bytes with a fixed number of dimensions;
// float32 samples are a count and then 1 to 3 dimensions (a float32 model input has rank 1 to 3).
enum class IdxKind { Images, Labels, Floats };

// Checks the header and that it describes exactly the bytes that follow it.
IdxContent parse_header(const std::vector<uint8_t>& bytes, const std::string& path, IdxKind kind,
                        bool was_gzip) {
  const bool images = kind == IdxKind::Images;
  const bool floats = kind == IdxKind::Floats;
  const size_t min_dims = images ? 3 : floats ? 2 : 1;
  const size_t max_dims = images ? 3 : floats ? 4 : 1;
  const uint8_t want_type = floats ? 0x0D : 0x08;
  const uint64_t element_bytes = floats ? 4 : 1;
  if (bytes.size() < 4) {
    throw FormatError(path, "too short to be an IDX file (" + std::to_string(bytes.size()) +
                                " bytes" + (was_gzip ? " after decompression" : "") + ")");
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    throw FormatError(path, "not an IDX file: it starts with " + hex_byte(bytes[0]) + " " +
                                hex_byte(bytes[1]) + ", an IDX file starts with 0x00 0x00" +
                                (floats ? " (float32 samples are read from IDX float32 files only)" : ""));
  }
  const uint8_t type = bytes[2];
  if (type != want_type) {
    const char* name = idx_type_name(type);
    // The engine reads whichever the model's input dtype asks for; say which one that is.
    const std::string rule =
        floats ? "the samples of a float32-input model must be float32 (0x0D)"
               : std::string(images ? "pixels" : "labels") + " must be unsigned bytes (0x08)" +
                     (images && type == 0x0D ? "; float32 IDX data is for models with float32 input" : "");
    throw FormatError(path, name ? "IDX element type " + hex_byte(type) + " (" + name + ") is not supported; " + rule
                                 : "unknown IDX element type " + hex_byte(type) + " (not an IDX file?)");
  }
  const size_t dims = bytes[3];
  if (dims < min_dims || dims > max_dims) {
    std::string hint;
    if (images && dims == 1) hint = ": this is an IDX labels file, not images";
    if (kind == IdxKind::Labels && dims == 3) hint = ": this is an IDX images file, not labels";
    const std::string expected = floats ? "2 to 4 (count, then the 1 to 3 dimensions of one sample)"
                                        : images ? "3 (count, rows, columns)" : "1 (count)";
    throw FormatError(path, "IDX file has " + count_of(dims, "dimension") + ", expected " + expected + hint);
  }
  IdxContent content;
  content.header_bytes = 4 + 4 * dims;
  if (bytes.size() < content.header_bytes) {
    throw FormatError(path, "IDX header is truncated: " + std::to_string(bytes.size()) +
                                " bytes, the header needs " + std::to_string(content.header_bytes));
  }
  const char* dim_names[4] = {"count", images ? "rows" : "1", images ? "columns" : "2", "3"};
  uint64_t expected = element_bytes;
  bool overflow = false;
  for (size_t d = 0; d < dims; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    const uint32_t value = uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
    if (value == 0) {
      throw FormatError(path, std::string("IDX dimension ") + dim_names[d] +
                                  " is 0; every dimension must be at least 1");
    }
    content.dims.push_back(value);
    overflow = overflow || __builtin_mul_overflow(expected, uint64_t{value}, &expected);
  }
  const uint64_t actual = bytes.size() - content.header_bytes;
  if (overflow || expected != actual) {
    std::string claim = count_of(content.dims[0], images ? "image" : floats ? "sample" : "label");
    if (dims > 1) {
      claim += " of ";
      for (size_t d = 1; d < dims; ++d) claim += (d > 1 ? "×" : "") + std::to_string(content.dims[d]);
      if (floats) claim += " float32";
    }
    throw FormatError(path, "IDX header says " + claim + " = " +
                                (overflow ? std::string("more than 2^64") : std::to_string(expected)) +
                                " bytes of data, but the file holds " + std::to_string(actual) +
                                " bytes after the header" + (was_gzip ? " (decompressed)" : "") +
                                (actual < expected ? ": the file is truncated"
                                                   : ": there is data after the last item"));
  }
  return content;
}

}  // namespace

ImageBatch read_idx_images(const std::string& path) {
  bool was_gzip = false;
  std::vector<uint8_t> bytes = read_maybe_gzip(path, kMaxIdxBytes, &was_gzip);
  const IdxContent content = parse_header(bytes, path, IdxKind::Images, was_gzip);
  ImageBatch batch;
  batch.source = path;
  batch.count = content.dims[0];
  batch.channels = 1;
  // rows × cols ≤ file size ≤ 1 GiB, so both fit an int.
  batch.height = static_cast<int>(content.dims[1]);
  batch.width = static_cast<int>(content.dims[2]);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(content.header_bytes));
  batch.pixels = std::move(bytes);
  return batch;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  bool was_gzip = false;
  std::vector<uint8_t> bytes = read_maybe_gzip(path, kMaxIdxBytes, &was_gzip);
  const IdxContent content = parse_header(bytes, path, IdxKind::Labels, was_gzip);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(content.header_bytes));
  return bytes;
}

FloatBatch read_idx_floats(const std::string& path) {
  bool was_gzip = false;
  const std::vector<uint8_t> bytes = read_maybe_gzip(path, kMaxIdxBytes, &was_gzip);
  const IdxContent content = parse_header(bytes, path, IdxKind::Floats, was_gzip);
  FloatBatch batch;
  batch.source = path;
  batch.count = content.dims[0];
  batch.sample_shape.assign(content.dims.begin() + 1, content.dims.end());
  // The header check made the data exactly count × product(sample_shape) × 4 bytes (≤ 1 GiB).
  const size_t values = (bytes.size() - content.header_bytes) / 4;
  const size_t per_sample = values / static_cast<size_t>(batch.count);
  batch.values.resize(values);
  const uint8_t* p = bytes.data() + content.header_bytes;
  for (size_t i = 0; i < values; ++i, p += 4) {
    const uint32_t bits = uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];  // big-endian
    float value;
    std::memcpy(&value, &bits, sizeof value);
    // NaN or infinity would flow through every node into the probabilities; no real input has them.
    if (!std::isfinite(value)) {
      throw FormatError(path, "sample " + std::to_string(i / per_sample) + ", value " + std::to_string(i % per_sample) +
                                  " is " + (std::isnan(value) ? "NaN" : "infinite") +
                                  "; every value must be a finite number");
    }
    batch.values[i] = value;
  }
  return batch;
}

std::optional<std::string> find_labels_for(const std::string& images_path) {
  namespace fs = std::filesystem;
  const fs::path path(images_path);
  std::string stem = path.filename().string();
  const bool gz = stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".gz") == 0;
  if (gz) stem.resize(stem.size() - 3);
  const size_t images_at = stem.rfind("images");
  const size_t idx3_at = stem.rfind("idx3");
  if (images_at == std::string::npos || idx3_at == std::string::npos || idx3_at < images_at) {
    return std::nullopt;
  }
  // Replace the later occurrence first so the earlier index stays valid.
  stem.replace(idx3_at, 4, "idx1");
  stem.replace(images_at, 6, "labels");
  const std::array<const char*, 2> suffixes =
      gz ? std::array<const char*, 2>{".gz", ""} : std::array<const char*, 2>{"", ".gz"};
  for (const char* suffix : suffixes) {
    const fs::path candidate = path.parent_path() / (stem + suffix);
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return std::nullopt;
}

}  // namespace formats

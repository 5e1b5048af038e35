#include "formats/idx.hpp"

#include <array>
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

// Checks the header and that it describes exactly the bytes that follow it. `kind` is "images"
// or "labels" and selects the expected number of dimensions.
IdxContent parse_header(const std::vector<uint8_t>& bytes, const std::string& path, bool images,
                        bool was_gzip) {
  const size_t want_dims = images ? 3 : 1;
  const char* layout = images ? "count, rows, columns" : "count";
  if (bytes.size() < 4) {
    throw FormatError(path, "too short to be an IDX file (" + std::to_string(bytes.size()) +
                                " bytes" + (was_gzip ? " after decompression" : "") + ")");
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    throw FormatError(path, "not an IDX file: it starts with " + hex_byte(bytes[0]) + " " +
                                hex_byte(bytes[1]) + ", an IDX file starts with 0x00 0x00");
  }
  const uint8_t type = bytes[2];
  if (type != 0x08) {
    const char* name = idx_type_name(type);
    throw FormatError(path, name ? "IDX element type " + hex_byte(type) + " (" + name +
                                       ") is not supported; " + (images ? "pixels" : "labels") +
                                       " must be unsigned bytes (0x08)"
                                 : "unknown IDX element type " + hex_byte(type) +
                                       " (not an IDX file?)");
  }
  const size_t dims = bytes[3];
  if (dims != want_dims) {
    std::string hint;
    if (images && dims == 1) hint = ": this is an IDX labels file, not images";
    if (!images && dims == 3) hint = ": this is an IDX images file, not labels";
    throw FormatError(path, "IDX file has " + count_of(dims, "dimension") + ", expected " +
                                std::to_string(want_dims) + " (" + layout + ")" + hint);
  }
  IdxContent content;
  content.header_bytes = 4 + 4 * dims;
  if (bytes.size() < content.header_bytes) {
    throw FormatError(path, "IDX header is truncated: " + std::to_string(bytes.size()) +
                                " bytes, the header needs " + std::to_string(content.header_bytes));
  }
  const char* dim_names[3] = {"count", images ? "rows" : "", "columns"};
  uint64_t expected = 1;
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
    std::string claim = count_of(content.dims[0], images ? "image" : "label");
    if (images) claim += " of " + std::to_string(content.dims[1]) + "×" + std::to_string(content.dims[2]);
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
  const IdxContent content = parse_header(bytes, path, true, was_gzip);
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
  const IdxContent content = parse_header(bytes, path, false, was_gzip);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(content.header_bytes));
  return bytes;
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

// PGM (Netpbm graymap): "P5" binary and "P2" plain text, one image per file.
#include <algorithm>
#include <string>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/image.hpp"

namespace formats {
namespace {

bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class PgmParser {
 public:
  PgmParser(std::span<const uint8_t> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  // Header numbers: whitespace and '#' comments (to the end of the line) may precede each.
  int64_t header_number(const char* name) {
    bool separated = false;
    while (pos_ < bytes_.size()) {
      if (is_space(bytes_[pos_])) {
        ++pos_;
        separated = true;
      } else if (bytes_[pos_] == '#') {
        while (pos_ < bytes_.size() && bytes_[pos_] != '\n' && bytes_[pos_] != '\r') ++pos_;
        separated = true;
      } else {
        break;
      }
    }
    if (pos_ >= bytes_.size()) fail(std::string("PGM file ends before the ") + name);
    if (!separated) fail(std::string("PGM header: expected whitespace before the ") + name);
    return number(name);
  }

  int64_t number(const char* name) {
    if (pos_ >= bytes_.size()) fail(std::string("PGM file ends before the ") + name);
    if (bytes_[pos_] < '0' || bytes_[pos_] > '9') {
      fail(std::string("PGM: expected a number for the ") + name + ", got '" +
           static_cast<char>(bytes_[pos_]) + "'");
    }
    int64_t value = 0;
    while (pos_ < bytes_.size() && bytes_[pos_] >= '0' && bytes_[pos_] <= '9') {
      value = value * 10 + (bytes_[pos_++] - '0');
      if (value > 1'000'000'000) fail(std::string("PGM: the ") + name + " is too large");
    }
    return value;
  }

  void skip_space() {
    while (pos_ < bytes_.size() && is_space(bytes_[pos_])) ++pos_;
  }

  [[noreturn]] void fail(const std::string& problem) const { throw FormatError(source_, problem); }

  std::span<const uint8_t> bytes_;
  const std::string& source_;
  size_t pos_ = 2;  // after the magic
};

}  // namespace

ImageBatch decode_pgm(std::span<const uint8_t> bytes, const std::string& source) {
  PgmParser parser(bytes, source);
  if (bytes.size() < 2 || bytes[0] != 'P' || (bytes[1] != '5' && bytes[1] != '2')) {
    parser.fail("not a PGM image (expected P5 or P2)");
  }
  const bool binary = bytes[1] == '5';
  const int64_t width = parser.header_number("width");
  const int64_t height = parser.header_number("height");
  const int64_t maxval = parser.header_number("maximum value");
  if (width < 1 || height < 1 || width > kMaxImageSide || height > kMaxImageSide) {
    parser.fail("PGM image is " + std::to_string(width) + "×" + std::to_string(height) +
                " pixels; width and height must be between 1 and " + std::to_string(kMaxImageSide));
  }
  if (maxval < 1 || maxval > 65535) {
    parser.fail("PGM maximum value is " + std::to_string(maxval) + "; it must be 1 to 65535");
  }
  ImageBatch batch;
  batch.source = source;
  batch.count = 1;
  batch.channels = 1;
  batch.width = static_cast<int>(width);
  batch.height = static_cast<int>(height);
  const size_t pixels = static_cast<size_t>(width * height);
  // Sized only once the data are known to be there: a 20-byte header may claim 16384×16384.
  auto to_byte = [&](int64_t value) {
    if (value > maxval) {
      parser.fail("PGM sample " + std::to_string(value) + " exceeds the maximum value " +
                  std::to_string(maxval));
    }
    return static_cast<uint8_t>(maxval == 255 ? value : (value * 255 + maxval / 2) / maxval);
  };

  if (binary) {
    // Exactly one whitespace byte separates the maximum value from the raster.
    if (parser.pos_ >= bytes.size() || !is_space(bytes[parser.pos_])) {
      parser.fail("PGM header: expected one whitespace byte after the maximum value");
    }
    ++parser.pos_;
    const size_t sample_bytes = maxval < 256 ? 1 : 2;
    const size_t needed = pixels * sample_bytes;
    const size_t available = bytes.size() - parser.pos_;
    if (available < needed) {
      parser.fail("PGM raster is truncated: " + std::to_string(available) + " of " +
                  std::to_string(needed) + " bytes for " + std::to_string(width) + "×" +
                  std::to_string(height) + " pixels");
    }
    if (available > needed) {
      parser.fail(count_of(available - needed, "unexpected byte") +
                  " after the PGM image data (only one image per file)");
    }
    const uint8_t* raster = bytes.data() + parser.pos_;
    batch.pixels.resize(pixels);
    for (size_t i = 0; i < pixels; ++i) {
      const int64_t value = sample_bytes == 1
                                ? raster[i]
                                : (int64_t{raster[2 * i]} << 8 | raster[2 * i + 1]);  // big-endian
      batch.pixels[i] = to_byte(value);
    }
  } else {
    batch.pixels.reserve(std::min(pixels, bytes.size()));  // each sample takes at least one byte
    for (size_t i = 0; i < pixels; ++i) {
      const size_t before = parser.pos_;
      parser.skip_space();
      if (parser.pos_ >= bytes.size()) {
        parser.fail("PGM data end after " + std::to_string(i) + " of " + std::to_string(pixels) +
                    " samples");
      }
      if (i > 0 && parser.pos_ == before) parser.fail("PGM samples must be separated by whitespace");
      batch.pixels.push_back(to_byte(parser.number("sample")));
    }
    parser.skip_space();
    if (parser.pos_ != bytes.size()) {
      parser.fail("unexpected data after the " + count_of(pixels, "PGM sample"));
    }
  }
  return batch;
}

}  // namespace formats

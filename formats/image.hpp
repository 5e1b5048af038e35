#pragma once
// Input images as the engine consumes them: a batch of uint8 pixels, NCHW. read_images() takes
// any supported data file (IDX images, raw or gzip; PNG; JPEG; PGM), recognised by its first
// bytes, never by its extension. Limits are listed in formats/README.md.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace formats {

struct ImageBatch {
  std::string source;  // the file the pixels came from
  int64_t count = 0;
  int channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // count * channels * height * width bytes, NCHW
};

inline constexpr uint64_t kMaxImageFileBytes = uint64_t{64} << 20;  // 64 MiB
inline constexpr int kMaxImageSide = 16384;                          // pixels, width and height

// One PNG, JPEG or PGM (P2/P5) image as 1-channel 8-bit grayscale; count = 1. Colour is converted
// to luma, 16-bit samples to 8-bit, transparency composited onto black (MNIST's background).
ImageBatch read_image_file(const std::string& path);

// IDX images (raw or gzip) or one image file, recognised by the file's first bytes.
ImageBatch read_images(const std::string& path);

// Decoders for bytes already in memory; `source` names them in errors.
ImageBatch decode_png(std::span<const uint8_t> bytes, const std::string& source);
ImageBatch decode_jpeg(std::span<const uint8_t> bytes, const std::string& source);
ImageBatch decode_pgm(std::span<const uint8_t> bytes, const std::string& source);

}  // namespace formats

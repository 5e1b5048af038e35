#pragma once
// IDX files (the MNIST distribution format), raw or gzip-compressed. Reading rules and limits are
// specified in formats/README.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/image.hpp"

namespace formats {

// Largest IDX content accepted, after decompression (and largest file read, compressed or not).
inline constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 30;  // 1 GiB

// An idx3 ubyte file: [count, rows, cols] → ImageBatch with channels = 1.
ImageBatch read_idx_images(const std::string& path);

// Samples for a model whose input is float32 (already preprocessed), read from an IDX float32 file.
struct FloatBatch {
  std::string source;  // the file the values came from
  int64_t count = 0;
  std::vector<int64_t> sample_shape;  // one sample: 1 to 3 dimensions, each at least 1
  std::vector<float> values;          // count × product(sample_shape), row-major
};

// An IDX float32 file (element type 0x0D, big-endian IEEE 754): [count, d1 (, d2 (, d3))], one
// sample of shape [d1, ...] after another. Every value must be finite.
FloatBatch read_idx_floats(const std::string& path);

// An idx1 ubyte file: one byte per label.
std::vector<uint8_t> read_idx_labels(const std::string& path);

// The labels file beside an images file by MNIST naming: t10k-images-idx3-ubyte[.gz] →
// t10k-labels-idx1-ubyte[.gz], t10k-images.idx3-ubyte → t10k-labels.idx1-ubyte. Prefers the same
// compression as the images, then the other; nullopt when no such file exists.
std::optional<std::string> find_labels_for(const std::string& images_path);

// The file's bytes, gunzipped when they start with the gzip magic (1f 8b); `was_gzip` says which.
// Both the file and the decompressed data are limited to `max_bytes`. Throws FormatError.
std::vector<uint8_t> read_maybe_gzip(const std::string& path, uint64_t max_bytes,
                                     bool* was_gzip = nullptr);

}  // namespace formats

// Fuzz target: the IDX reader, raw and gzip (read_idx_images, read_idx_labels, read_idx_floats,
// and read_images, which recognises the file by its first bytes). The input is written to a file
// as the readers take paths. What they return must be consistent with the header they accepted.
#include <cmath>
#include <string>

#include "formats/idx.hpp"
#include "formats/image.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace fuzz {
namespace {

void check_batch(const formats::ImageBatch& batch) {
  require(batch.count >= 1 && batch.channels >= 1 && batch.height >= 1 && batch.width >= 1,
          "an accepted image batch has an empty dimension");
  require(static_cast<uint64_t>(batch.count) * static_cast<uint64_t>(batch.channels) *
                  static_cast<uint64_t>(batch.height) * static_cast<uint64_t>(batch.width) ==
              batch.pixels.size(),
          "an accepted image batch holds a different number of pixels than its dimensions");
}

void check_floats(const formats::FloatBatch& batch) {
  require(batch.count >= 1 && !batch.sample_shape.empty() && batch.sample_shape.size() <= 3,
          "an accepted float32 batch has no samples or a sample rank outside 1 to 3");
  uint64_t elements = static_cast<uint64_t>(batch.count);
  for (const int64_t d : batch.sample_shape) {
    require(d >= 1, "an accepted float32 batch has an empty dimension");
    elements *= static_cast<uint64_t>(d);
  }
  require(elements == batch.values.size(),
          "an accepted float32 batch holds a different number of values than its shape");
  for (const float v : batch.values) require(std::isfinite(v), "an accepted float32 batch holds a non-finite value");
}

}  // namespace

int run_idx(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("fuzz-images-idx3-ubyte", std::span<const uint8_t>(data, size));
  try {
    check_batch(formats::read_idx_images(path));
  } catch (const formats::FormatError& error) {
    check_error(error, path);
  }
  try {
    const std::vector<uint8_t> labels = formats::read_idx_labels(path);
    require(!labels.empty(), "an accepted labels file is empty");
  } catch (const formats::FormatError& error) {
    check_error(error, path);
  }
  try {
    check_floats(formats::read_idx_floats(path));
  } catch (const formats::FormatError& error) {
    check_error(error, path);
  }
  try {
    check_batch(formats::read_images(path));
  } catch (const formats::FormatError& error) {
    check_error(error, path);
  }
  return 0;
}

}  // namespace fuzz

#ifdef ENGINE_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::run_idx(data, size);
}
#endif

// Fuzz target: the IDX reader, raw and gzip (read_idx_images, read_idx_labels, and read_images,
// which recognises the file by its first bytes). The input is written to a file as the readers
// take paths. What they return must be consistent with the header they accepted.
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

// Fuzz target: the image decoders. read_images() on a file (recognition by the first bytes, then
// PNG, JPEG, PGM or IDX), plus the PGM decoder on the bytes in memory. A decoded image is one
// grayscale picture within the side limit.
#include <string>

#include "formats/image.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace fuzz {
namespace {

void check_image(const formats::ImageBatch& image, bool single) {
  require(image.count >= 1 && image.channels == 1, "a decoded image has a wrong count or channels");
  if (single) {
    require(image.count == 1, "an image file decoded to several images");
    require(image.height >= 1 && image.width >= 1 && image.height <= formats::kMaxImageSide &&
                image.width <= formats::kMaxImageSide,
            "a decoded image is outside the side limit");
  }
  require(static_cast<uint64_t>(image.count) * static_cast<uint64_t>(image.height) *
                  static_cast<uint64_t>(image.width) ==
              image.pixels.size(),
          "a decoded image holds a different number of pixels than its dimensions");
}

}  // namespace

int run_image(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("fuzz-image", std::span<const uint8_t>(data, size));
  try {
    const formats::ImageBatch image = formats::read_images(path);
    check_image(image, !(size >= 2 && ((data[0] == 0 && data[1] == 0) || (data[0] == 0x1f && data[1] == 0x8b))));
  } catch (const formats::FormatError& error) {
    check_error(error, path);
  }
  try {
    check_image(formats::decode_pgm(std::span<const uint8_t>(data, size), "memory.pgm"), true);
  } catch (const formats::FormatError& error) {
    check_error(error, "memory.pgm");
  }
  return 0;
}

}  // namespace fuzz

#ifdef ENGINE_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::run_image(data, size);
}
#endif

// engine show: one image as ASCII art, to see what the data file holds.
#include <fmt/format.h>

#include <string>

#include "engine/cli/commands.hpp"
#include "engine/cli/labels.hpp"
#include "formats/error.hpp"
#include "formats/image.hpp"

namespace engine::cli {
namespace {

// Brighter pixel, denser glyph: MNIST digits are white on black, so the strokes stand out.
constexpr char kRamp[] = " .:-=+*#%@";
constexpr int kRampSize = sizeof(kRamp) - 1;

}  // namespace

int show_command(const ShowOptions& o) {
  const formats::ImageBatch images = formats::read_images(o.data);
  if (o.index < 0 || o.index >= images.count)
    throw formats::FormatError(images.source, fmt::format("no image {}: it holds {} image{} (indices 0..{})", o.index,
                                                          images.count, images.count == 1 ? "" : "s", images.count - 1));
  const auto labels = load_labels(images, o.labels);

  fmt::print("{} image {} of {}, {}x{}{}", images.source, o.index, images.count, images.width, images.height,
             images.channels > 1 ? fmt::format(" ({} channels averaged)", images.channels) : std::string());
  if (labels) fmt::print(", label {}", int(labels->values[size_t(o.index)]));
  fmt::print("\n");

  const size_t plane = size_t(images.height) * size_t(images.width);
  const uint8_t* pixels = images.pixels.data() + size_t(o.index) * plane * size_t(images.channels);
  for (int y = 0; y < images.height; ++y) {
    std::string line;
    for (int x = 0; x < images.width; ++x) {
      int sum = 0;
      for (int c = 0; c < images.channels; ++c) sum += pixels[size_t(c) * plane + size_t(y) * images.width + x];
      const int value = sum / images.channels;
      // Two glyphs per pixel: terminal cells are about twice as tall as wide.
      line.append(2, kRamp[value * kRampSize / 256]);
    }
    // Trailing blanks carry nothing and make copied output ragged.
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print("{}\n", line);
  }
  return 0;
}

}  // namespace engine::cli

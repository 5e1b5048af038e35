#pragma once
// Which labels go with a data file: the one the user named, or the MNIST-named file beside it.
#include <optional>
#include <string>
#include <vector>

#include "formats/idx.hpp"
#include "formats/image.hpp"

namespace engine::cli {

struct Labels {
  std::string path;
  std::vector<uint8_t> values;  // one per image of the data file
};

// From `explicit_path` when not empty, otherwise found beside `images` by MNIST naming (logged);
// nullopt when there is none. Throws FormatError when the count differs from the images'.
std::optional<Labels> load_labels(const formats::ImageBatch& images, const std::string& explicit_path);
// The same for the float32 samples of a float32-input model.
std::optional<Labels> load_labels(const formats::FloatBatch& samples, const std::string& explicit_path);
// The same for `count` samples read from `source`; `noun` ("image", "sample") names them in messages.
std::optional<Labels> load_labels_for(const std::string& source, int64_t count, const char* noun,
                                      const std::string& explicit_path);

}  // namespace engine::cli

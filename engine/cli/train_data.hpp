#pragma once
// A training or validation set for `engine train`, read and checked whole before the first step:
// samples of the model's input size and dtype, one label per sample, every label one of the
// model's classes. Any problem is a FormatError naming the file.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model.hpp"

namespace engine::cli {

struct LabelledSet {
  std::string source, labels_path;
  int64_t count = 0;
  size_t sample_bytes = 0;     // raw bytes per sample (uint8 pixels or float32 values)
  std::vector<uint8_t> bytes;  // count * sample_bytes
  std::vector<uint8_t> labels;
};

// `what` ("training set", "validation set") goes into the messages; `labels_path` empty: the
// MNIST-named file beside the images, which must then exist.
LabelledSet load_labelled_set(const formats::Model& model, int64_t classes, const std::string& images_path,
                              const std::string& labels_path, const char* what);

}  // namespace engine::cli

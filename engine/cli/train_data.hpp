#pragma once
// Sample sets read and checked whole before any work: for `engine train` (training and validation
// sets: samples of the model's input size and dtype, one label per sample, every label one of the
// model's classes) and `engine calibrate` (samples only). Any problem is a FormatError naming the file.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model.hpp"

namespace engine::cli {

struct SampleSet {
  std::string source;
  int64_t count = 0;
  size_t sample_bytes = 0;     // raw bytes per sample (uint8 pixels or float32 values)
  std::vector<uint8_t> bytes;  // count * sample_bytes
  bool is_float = false;       // float32 samples (a float32-input model) rather than uint8 images
};

struct LabelledSet : SampleSet {
  std::string labels_path;
  std::vector<uint8_t> labels;
};

// The samples of `path` in the model's input dtype and shape: uint8 images (IDX or one image file)
// or IDX float32. `what` ("training set", "calibration data") goes into the messages.
SampleSet load_samples(const formats::Model& model, const std::string& path, const char* what);

// `labels_path` empty: the MNIST-named file beside the images, which must then exist.
LabelledSet load_labelled_set(const formats::Model& model, int64_t classes, const std::string& images_path,
                              const std::string& labels_path, const char* what);

}  // namespace engine::cli

#pragma once
// What `engine run` classifies: every data file named, a folder standing for the image files in it,
// read in the model's input dtype and laid end to end in the order given (a folder's files in name
// order), each file remembered with the range of samples it holds, so that results are attributed
// to it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/model.hpp"

namespace engine::cli {

struct InputFile {
  std::string path;
  int64_t first = 0, count = 0;  // its samples within the concatenation
  std::optional<std::string> labels_path;  // where its labels came from, when it has them
};

struct RunInputs {
  std::vector<InputFile> files;
  int64_t count = 0;
  size_t sample_bytes = 0;
  std::vector<uint8_t> bytes;  // count * sample_bytes: uint8 pixels or float32 values
  std::vector<uint8_t> labels; // one per sample when every file has labels; empty otherwise
  bool is_float = false;
  std::string describe() const;  // "a.idx" or "3 files (first a.png)"
};

// The image files of a folder (PNG, JPEG, PGM by extension, any case), in name order; throws
// std::invalid_argument naming the folder when it holds none.
std::vector<std::string> image_files_in(const std::string& folder);

// Reads every file (a folder: image_files_in), checks each against the model's input, and finds
// labels: `labels_path` (only with one file) or the MNIST-named file beside each. Throws
// FormatError naming the file at fault.
RunInputs read_run_inputs(const formats::Model& model, const std::vector<std::string>& data, const std::string& labels_path);

}  // namespace engine::cli

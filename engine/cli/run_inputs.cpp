#include "engine/cli/run_inputs.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <stdexcept>

#include "engine/cli/labels.hpp"
#include "formats/error.hpp"
#include "formats/idx.hpp"
#include "formats/image.hpp"

namespace engine::cli {
namespace {

namespace fs = std::filesystem;

void check_floats_fit(const formats::Model& model, const formats::FloatBatch& floats) {
  const auto& in = model.input;
  if (floats.sample_shape != in.raw_shape)
    throw formats::FormatError(floats.source, fmt::format("samples are {} but model '{}' expects float32 {}",
                                                          formats::shape_to_string(floats.sample_shape), model.name,
                                                          formats::shape_to_string(in.raw_shape)));
  if (floats.count < 1) throw formats::FormatError(floats.source, "holds no samples");
}

void check_images_fit(const formats::Model& model, const formats::ImageBatch& images) {
  const auto& in = model.input;
  const formats::Shape have{images.channels, images.height, images.width};
  if (have != in.raw_shape)
    throw formats::FormatError(images.source,
                               fmt::format("images are {}x{}x{} (CxHxW) but model '{}' expects {}x{}x{}", images.channels,
                                           images.height, images.width, model.name, in.raw_shape[0], in.raw_shape[1],
                                           in.raw_shape[2]));
  if (images.count < 1) throw formats::FormatError(images.source, "holds no images");
}

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".pgm";
}

}  // namespace

std::string RunInputs::describe() const {
  if (files.size() == 1) return files[0].path;
  return fmt::format("{} files (first {})", files.size(), files[0].path);
}

std::vector<std::string> image_files_in(const std::string& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && is_image_name(it->path())) out.push_back(it->path().string());
  if (ec) throw formats::FormatError(folder, "cannot list the folder: " + ec.message());
  if (out.empty()) throw formats::FormatError(folder, "is a folder with no image file in it (.png, .jpg, .jpeg, .pgm)");
  std::sort(out.begin(), out.end());
  return out;
}

RunInputs read_run_inputs(const formats::Model& model, const std::vector<std::string>& data, const std::string& labels_path) {
  std::vector<std::string> paths;
  for (const std::string& d : data) {
    std::error_code ec;
    if (fs::is_directory(d, ec)) {
      const auto found = image_files_in(d);
      spdlog::info("{}: {} image file{}", d, found.size(), found.size() == 1 ? "" : "s");
      paths.insert(paths.end(), found.begin(), found.end());
    } else {
      paths.push_back(d);
    }
  }
  if (!labels_path.empty() && paths.size() != 1)
    throw std::invalid_argument(fmt::format("--labels goes with one data file; {} are given (labels beside each IDX "
                                            "file are found by MNIST naming)", paths.size()));
  RunInputs in;
  in.is_float = model.input.dtype == formats::InputDType::Float32;
  std::vector<std::optional<Labels>> labels;
  for (const std::string& path : paths) {
    InputFile f;
    f.path = path;
    f.first = in.count;
    const uint8_t* bytes = nullptr;
    size_t sample_bytes = 0;
    formats::FloatBatch floats;
    formats::ImageBatch images;
    if (in.is_float) {
      floats = formats::read_idx_floats(path);
      check_floats_fit(model, floats);
      f.count = floats.count;
      sample_bytes = floats.values.size() / size_t(floats.count) * sizeof(float);
      bytes = reinterpret_cast<const uint8_t*>(floats.values.data());
      labels.push_back(load_labels(floats, labels_path));
    } else {
      images = formats::read_images(path);
      check_images_fit(model, images);
      f.count = images.count;
      sample_bytes = size_t(images.channels) * size_t(images.height) * size_t(images.width);
      bytes = images.pixels.data();
      labels.push_back(load_labels(images, labels_path));
    }
    if (labels.back()) f.labels_path = labels.back()->path;
    in.sample_bytes = sample_bytes;
    in.bytes.insert(in.bytes.end(), bytes, bytes + size_t(f.count) * sample_bytes);
    in.count += f.count;
    in.files.push_back(std::move(f));
  }
  const auto labelled = std::count_if(labels.begin(), labels.end(), [](const auto& l) { return l.has_value(); });
  if (labelled == int64_t(labels.size())) {
    for (const auto& l : labels) in.labels.insert(in.labels.end(), l->values.begin(), l->values.end());
  } else if (labelled > 0) {
    spdlog::warn("labels found for {} of the {} data files only: no accuracy (predictions only)", labelled, labels.size());
    for (InputFile& f : in.files) f.labels_path.reset();
  }
  return in;
}

}  // namespace engine::cli

#include "engine/cli/train_data.hpp"

#include <fmt/format.h>

#include <cstring>

#include "engine/cli/labels.hpp"
#include "formats/error.hpp"
#include "formats/idx.hpp"
#include "formats/image.hpp"

namespace engine::cli {

SampleSet load_samples(const formats::Model& model, const std::string& path, const char* what) {
  SampleSet set;
  const auto& in = model.input;
  if (in.dtype == formats::InputDType::Float32) {
    formats::FloatBatch floats = formats::read_idx_floats(path);
    if (floats.sample_shape != in.raw_shape)
      throw formats::FormatError(floats.source, fmt::format("{}: samples are {} but model '{}' expects float32 {}", what,
                                                            formats::shape_to_string(floats.sample_shape), model.name,
                                                            formats::shape_to_string(in.raw_shape)));
    set.is_float = true;
    set.source = floats.source;
    set.count = floats.count;
    set.sample_bytes = size_t(formats::element_count(in.raw_shape)) * sizeof(float);
    set.bytes.resize(floats.values.size() * sizeof(float));
    std::memcpy(set.bytes.data(), floats.values.data(), set.bytes.size());
  } else {
    formats::ImageBatch images = formats::read_images(path);
    const formats::Shape have{images.channels, images.height, images.width};
    if (have != in.raw_shape)
      throw formats::FormatError(images.source, fmt::format("{}: images are {}x{}x{} (CxHxW) but model '{}' expects {}x{}x{}",
                                                            what, images.channels, images.height, images.width,
                                                            model.name, in.raw_shape[0], in.raw_shape[1],
                                                            in.raw_shape[2]));
    set.source = images.source;
    set.count = images.count;
    set.sample_bytes = size_t(formats::element_count(in.raw_shape));
    set.bytes = std::move(images.pixels);
  }
  if (set.count < 1) throw formats::FormatError(set.source, fmt::format("{}: holds no samples", what));
  return set;
}

LabelledSet load_labelled_set(const formats::Model& model, int64_t classes, const std::string& images_path,
                              const std::string& labels_path, const char* what) {
  LabelledSet set;
  static_cast<SampleSet&>(set) = load_samples(model, images_path, what);
  const std::optional<Labels> labels =
      load_labels_for(set.source, set.count, set.is_float ? "sample" : "image", labels_path);
  if (!labels)
    throw formats::FormatError(set.source, fmt::format("{}: no labels file given and none found beside it (MNIST naming); "
                                                       "give one with {}",
                                                       what, std::string(what) == "training set" ? "--labels" : "--val-labels"));
  for (int64_t i = 0; i < set.count; ++i)
    if (labels->values[size_t(i)] >= classes)
      throw formats::FormatError(labels->path, fmt::format("{}: label {} of sample {} is not one of the model's {} classes "
                                                           "(0 to {})",
                                                           what, int(labels->values[size_t(i)]), i, classes, classes - 1));
  set.labels_path = labels->path;
  set.labels = std::move(labels->values);
  return set;
}

}  // namespace engine::cli

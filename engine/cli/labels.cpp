#include "engine/cli/labels.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "formats/error.hpp"
#include "formats/idx.hpp"

namespace engine::cli {

std::optional<Labels> load_labels_for(const std::string& source, int64_t count, const char* noun,
                                      const std::string& explicit_path) {
  std::string path = explicit_path;
  if (path.empty()) {
    const auto found = formats::find_labels_for(source);
    if (!found) return std::nullopt;
    path = *found;
    spdlog::info("labels: {} (found beside the {}s)", path, noun);
  }
  Labels labels{path, formats::read_idx_labels(path)};
  // A count mismatch means the files do not belong together; matching a prefix would hide that.
  if (int64_t(labels.values.size()) != count)
    throw formats::FormatError(path, fmt::format("{} labels, but {} holds {} {}{}", labels.values.size(), source, count,
                                                 noun, count == 1 ? "" : "s"));
  return labels;
}

std::optional<Labels> load_labels(const formats::ImageBatch& images, const std::string& explicit_path) {
  return load_labels_for(images.source, images.count, "image", explicit_path);
}

std::optional<Labels> load_labels(const formats::FloatBatch& samples, const std::string& explicit_path) {
  return load_labels_for(samples.source, samples.count, "sample", explicit_path);
}

}  // namespace engine::cli

#include "engine/cli/labels.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "formats/error.hpp"
#include "formats/idx.hpp"

namespace engine::cli {

std::optional<Labels> load_labels(const formats::ImageBatch& images, const std::string& explicit_path) {
  std::string path = explicit_path;
  if (path.empty()) {
    const auto found = formats::find_labels_for(images.source);
    if (!found) return std::nullopt;
    path = *found;
    spdlog::info("labels: {} (found beside the images)", path);
  }
  Labels labels{path, formats::read_idx_labels(path)};
  // A count mismatch means the files do not belong together; matching a prefix would hide that.
  if (int64_t(labels.values.size()) != images.count)
    throw formats::FormatError(path, fmt::format("{} labels, but {} holds {} image{}", labels.values.size(),
                                                 images.source, images.count, images.count == 1 ? "" : "s"));
  return labels;
}

}  // namespace engine::cli

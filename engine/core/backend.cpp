#include "engine/core/backend.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace engine {

void check_supported(const Backend& backend, const Graph& graph) {
  // Every refusal in one message: fixing them one run at a time would be tedious.
  std::string problems;
  int count = 0;
  for (const PlannedNode& planned : graph.nodes) {
    const formats::Node& node = *planned.node;
    if (auto why = backend.unsupported(node)) {
      problems += fmt::format("{}node '{}' ({}): {}", count ? "; " : "", node.name, formats::op_name(node.op), *why);
      ++count;
    }
  }
  if (count > 0)
    throw std::runtime_error(fmt::format("backend '{}' cannot run model '{}' ({} unsupported node{}): {}",
                                         backend.name(), graph.model->name, count, count == 1 ? "" : "s",
                                         problems));
}

}  // namespace engine

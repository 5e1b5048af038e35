#include "engine/cli/backend_status.hpp"

#include "engine/cli/text_table.hpp"

namespace engine::cli {

std::string render_backend_table(const std::vector<BackendStatus>& statuses, const std::string& indent) {
  TextTable table({"backend", "priority", "status", "runs on / why not"});
  for (const auto& s : statuses)
    table.add({s.name, std::to_string(s.priority),
               s.available ? (s.is_default ? "available (default)" : "available") : "not available", s.detail});
  return table.render({1}, indent);
}

}  // namespace engine::cli

#include "engine/cli/backend_status.hpp"

#include "engine/cli/text_table.hpp"

namespace engine::cli {

std::string render_backend_table(const std::vector<BackendStatus>& statuses, const std::string& indent) {
  TextTable table({"backend", "priority", "status", "precisions", "runs on / why not"});
  for (const auto& s : statuses) {
    std::string precisions;
    for (const auto& p : s.precisions) precisions += (precisions.empty() ? "" : ",") + p;
    table.add({s.name, std::to_string(s.priority),
               s.available ? (s.is_default ? "available (default)" : "available") : "not available",
               precisions.empty() ? "-" : precisions, s.detail});
  }
  return table.render({1}, indent);
}

std::string render_device_list(const std::vector<BackendStatus>& statuses, const std::string& indent) {
  for (const auto& s : statuses) {
    if (s.devices.empty()) continue;
    TextTable table({"GPU", "device (--devices takes these indices, or all)"});
    for (size_t i = 0; i < s.devices.size(); ++i) table.add({std::to_string(i), s.devices[i]});
    return table.render({0}, indent);
  }
  return {};
}

}  // namespace engine::cli

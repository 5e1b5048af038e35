// engine backends: what is built in and what can run here.
#include <fmt/format.h>

#include "engine/cli/backend_status.hpp"
#include "engine/cli/commands.hpp"

namespace engine::cli {

int backends_command() {
  const auto statuses = backend_statuses();
  fmt::print("{}", render_backend_table(statuses, ""));
  if (const std::string gpus = render_device_list(statuses, ""); !gpus.empty()) fmt::print("\n{}", gpus);
  return 0;
}

}  // namespace engine::cli

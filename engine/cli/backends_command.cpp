// engine backends: what is built in and what can run here.
#include <fmt/format.h>

#include "engine/cli/backend_status.hpp"
#include "engine/cli/commands.hpp"

namespace engine::cli {

int backends_command() {
  fmt::print("{}", render_backend_table(backend_statuses(), ""));
  return 0;
}

}  // namespace engine::cli

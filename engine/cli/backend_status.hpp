#pragma once
// The registered backends as the user sees them (engine/api/backend_status.hpp), as a table.
#include <string>
#include <vector>

#include "engine/api/backend_status.hpp"

namespace engine::cli {

using api::backend_statuses;
using api::BackendStatus;

std::string render_backend_table(const std::vector<BackendStatus>& statuses, const std::string& indent);

}  // namespace engine::cli

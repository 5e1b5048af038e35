#pragma once
// The registered backends as the user sees them (engine/api/backend_status.hpp), as a table.
#include <string>
#include <vector>

#include "engine/api/backend_status.hpp"

namespace engine::cli {

using api::backend_statuses;
using api::BackendStatus;

std::string render_backend_table(const std::vector<BackendStatus>& statuses, const std::string& indent);
// "GPU 0  NVIDIA H100 ... (sm_90, 132 SMs, 79.1 GiB)" per device the GPU backends see (they all see
// the same CUDA devices: the first backend that lists any is used); "" when none does.
std::string render_device_list(const std::vector<BackendStatus>& statuses, const std::string& indent);

}  // namespace engine::cli

#pragma once
// The registered backends as the user sees them: available or not (and why), and what each runs on.
#include <string>
#include <vector>

namespace engine::cli {

struct BackendStatus {
  std::string name;
  int priority = 0;
  bool available = false;
  bool is_default = false;  // the one `engine run` takes without --backend
  std::string detail;       // description when available, the reason otherwise
};

std::vector<BackendStatus> backend_statuses();
std::string render_backend_table(const std::vector<BackendStatus>& statuses, const std::string& indent);

}  // namespace engine::cli

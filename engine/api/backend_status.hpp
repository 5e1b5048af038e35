#pragma once
// The registered backends as a user sees them: available here or not (and why), what each runs on.
// Shared by `engine backends`/`engine info` and the Python package's cnnengine.backends().
#include <string>
#include <vector>

namespace engine::api {

struct BackendStatus {
  std::string name;
  int priority = 0;
  bool available = false;
  bool is_default = false;  // the one `engine run` (and cnnengine.load) takes without a backend
  std::string detail;       // description when available, the reason otherwise
  std::vector<std::string> devices;  // GPU backends: one line per device by index (Backend::devices)
  // The --precision values compile() takes ("fp32", "tf32", ...; Backend::supports), for an available
  // backend; empty for one that cannot run here.
  std::vector<std::string> precisions;
};

std::vector<BackendStatus> backend_statuses();

}  // namespace engine::api

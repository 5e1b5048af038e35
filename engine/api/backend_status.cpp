#include "engine/api/backend_status.hpp"

#include <exception>

#include "engine/core/registry.hpp"

namespace engine::api {

std::vector<BackendStatus> backend_statuses() {
  const auto& registry = BackendRegistry::instance();
  std::string best;
  try {
    best = registry.best_available().name;
  } catch (const std::exception&) {
    // Nothing available: every row below says why.
  }
  std::vector<BackendStatus> out;
  for (const BackendEntry& e : registry.entries()) {
    BackendStatus s{e.name, e.priority, false, e.name == best, e.summary};
    const auto why = e.unavailable_reason ? e.unavailable_reason() : std::nullopt;
    if (why) {
      s.detail = *why;
    } else {
      // Creating it is how a backend learns its device; a failure there is a reason too.
      try {
        const auto backend = registry.create(e.name);
        s.detail = backend->description();
        s.devices = backend->devices();
        for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16, Precision::INT8})
          if (backend->supports(p)) s.precisions.push_back(precision_name(p));
        s.available = true;
      } catch (const std::exception& ex) {
        s.detail = ex.what();
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace engine::api

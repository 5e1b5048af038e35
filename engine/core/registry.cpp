#include "engine/core/registry.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace engine {

void BackendRegistry::add(BackendEntry entry) {
  if (entry.name.empty()) throw std::invalid_argument("a backend needs a name");
  if (!entry.create) throw std::invalid_argument(fmt::format("backend '{}' has no create function", entry.name));
  if (find(entry.name))
    throw std::invalid_argument(fmt::format("backend '{}' is registered twice", entry.name));
  entries_.push_back(std::move(entry));
}

const BackendEntry* BackendRegistry::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

namespace {

std::optional<std::string> reason_of(const BackendEntry& e) {
  return e.unavailable_reason ? e.unavailable_reason() : std::nullopt;
}

// "Available: cpu, custom; not available: cudnn (no usable NVIDIA GPU: ...)". Only for "no backend
// can run here", where every reason matters.
std::string availability_list(const std::vector<BackendEntry>& entries) {
  std::string available, unavailable;
  for (const auto& e : entries) {
    if (auto why = reason_of(e))
      unavailable += fmt::format("{}{} ({})", unavailable.empty() ? "" : "; ", e.name, *why);
    else
      available += fmt::format("{}{}", available.empty() ? "" : ", ", e.name);
  }
  std::string out = "Available: " + (available.empty() ? std::string("none") : available);
  if (!unavailable.empty()) out += "; not available here: " + unavailable;
  return out;
}

// The available entry with the highest priority, or nullptr. Ties keep registration order, so the
// choice never depends on anything but the build.
const BackendEntry* best_of(const std::vector<BackendEntry>& entries) {
  const BackendEntry* best = nullptr;
  for (const auto& e : entries) {
    if (best && e.priority <= best->priority) continue;
    if (!reason_of(e)) best = &e;
  }
  return best;
}

// What to do instead, in one short clause. The GPU backends usually share one reason (no GPU), so
// reasons are not listed here: `engine backends` gives each.
std::string what_instead(const std::vector<BackendEntry>& entries) {
  if (const BackendEntry* best = best_of(entries))
    return fmt::format("use --backend {} or see `engine backends`", best->name);
  return "none is available here (see `engine backends`)";
}

}  // namespace

const BackendEntry& BackendRegistry::best_available() const {
  const BackendEntry* best = best_of(entries_);
  if (!best) throw std::runtime_error("no backend can run here. " + availability_list(entries_));
  return *best;
}

std::unique_ptr<Backend> BackendRegistry::create(const std::string& name) const {
  const BackendEntry* e = find(name);
  if (!e) {
    std::string built;
    for (const auto& entry : entries_) built += (built.empty() ? "" : ", ") + entry.name;
    throw std::runtime_error(
        fmt::format("unknown backend '{}' (built in: {}); {}", name, built, what_instead(entries_)));
  }
  if (auto why = reason_of(*e))
    throw std::runtime_error(
        fmt::format("backend '{}' is not available here: {}; {}", name, *why, what_instead(entries_)));
  auto backend = e->create();
  if (!backend) throw std::runtime_error(fmt::format("backend '{}' could not be created", name));
  return backend;
}

}  // namespace engine

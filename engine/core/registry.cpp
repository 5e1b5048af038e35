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

// "Available: cpu, custom; not available: cudnn (no usable CUDA device: ...)".
std::string availability_list(const std::vector<BackendEntry>& entries, const std::string& skip) {
  std::string available, unavailable;
  for (const auto& e : entries) {
    if (e.name == skip) continue;
    if (auto why = reason_of(e))
      unavailable += fmt::format("{}{} ({})", unavailable.empty() ? "" : "; ", e.name, *why);
    else
      available += fmt::format("{}{}", available.empty() ? "" : ", ", e.name);
  }
  std::string out = "Available: " + (available.empty() ? std::string("none") : available);
  if (!unavailable.empty()) out += "; not available here: " + unavailable;
  return out;
}

}  // namespace

const BackendEntry& BackendRegistry::best_available() const {
  const BackendEntry* best = nullptr;
  for (const auto& e : entries_) {
    // Ties keep registration order, so the choice never depends on anything but the build.
    if (best && e.priority <= best->priority) continue;
    if (!reason_of(e)) best = &e;
  }
  if (!best)
    throw std::runtime_error("no backend can run here. " + availability_list(entries_, ""));
  return *best;
}

std::unique_ptr<Backend> BackendRegistry::create(const std::string& name) const {
  const BackendEntry* e = find(name);
  if (!e) throw std::runtime_error(fmt::format("unknown backend '{}'. {}", name, availability_list(entries_, "")));
  if (auto why = reason_of(*e))
    throw std::runtime_error(
        fmt::format("backend '{}' is not available here: {}. {}", name, *why, availability_list(entries_, name)));
  auto backend = e->create();
  if (!backend) throw std::runtime_error(fmt::format("backend '{}' could not be created", name));
  return backend;
}

}  // namespace engine

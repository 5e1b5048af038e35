#pragma once
// The "custom" backend: hand-written CUDA kernels for every v1 op (no cuDNN, no cuBLAS).
// Registered as "custom", priority 20, through register_custom_backend (engine_add_backend).
#include <memory>

#include "engine/core/backend.hpp"
#include "engine/core/registry.hpp"
#include "engine/custom/custom_options.hpp"

namespace engine {
void register_custom_backend(BackendRegistry& registry);
}  // namespace engine

namespace engine::custom {
// `options`: the backend's own kernel choices; the registry's "custom" takes the defaults.
std::unique_ptr<Backend> make_custom_backend(const CustomOptions& options = {});
}  // namespace engine::custom

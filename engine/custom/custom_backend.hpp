#pragma once
// The "custom" backend: hand-written CUDA kernels for every v1 op (no cuDNN, no cuBLAS).
// Registered as "custom", priority 20, through register_custom_backend (engine_add_backend).
#include <memory>

#include "engine/core/backend.hpp"
#include "engine/core/registry.hpp"

namespace engine {
void register_custom_backend(BackendRegistry& registry);
}  // namespace engine

namespace engine::custom {
std::unique_ptr<Backend> make_custom_backend();
}  // namespace engine::custom

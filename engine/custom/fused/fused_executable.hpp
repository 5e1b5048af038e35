#pragma once
// The custom backend's fused path at run time: weights on the device, the two chain kernels'
// launch shapes, forward(n) = conv chain then dense chain on the executable's stream.
#include <memory>
#include <string>

#include "engine/core/backend.hpp"
#include "engine/custom/custom_options.hpp"
#include "engine/custom/fused/fused_plan.hpp"

namespace engine::custom::fused {

// `header` is the plan summary's first lines (device, precision); the fused plan's lines follow.
// `image_options`: the image chain's choices (CustomOptions::image).
std::unique_ptr<Executable> make_fused_executable(const Graph& graph, FusedPlan plan, const CompileOptions& options,
                                                  const ImageChainOptions& image_options, const DeviceShape& device,
                                                  std::string header);

}  // namespace engine::custom::fused

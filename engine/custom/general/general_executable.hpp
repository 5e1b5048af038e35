#pragma once
// The custom backend's general fp32 path at run time (general_plan.hpp): weights packed and
// uploaded once, the plan's buffer allocated once, forward(n) = the plan's steps on the
// executable's stream, each GEMM with the block tile chosen for n (conv_gemm.hpp: same bits for
// every tile).
#include <memory>
#include <string>

#include "engine/core/backend.hpp"
#include "engine/custom/custom_options.hpp"

namespace engine::custom::general {

// `header`: the plan summary's first lines (device, precision); `why_not_fused`: why the fused
// chain does not run this graph (execution_path() and the summary say it).
std::unique_ptr<Executable> make_general_executable(const Graph& graph, const CompileOptions& options,
                                                    const GeneralOptions& general, std::string header,
                                                    std::string why_not_fused);

}  // namespace engine::custom::general

#pragma once
// The tensor-core chain at run time (--precision fp16 | bf16 | int8 on the custom backend):
// the converted (or quantized) weights on the device once, forward(n) = one kernel from the
// preprocessed input to the output on the executable's stream.
#include <memory>
#include <string>

#include "engine/core/backend.hpp"
#include "engine/custom/custom_options.hpp"
#include "engine/custom/fused/tc_chain_plan.hpp"

namespace engine::custom::tc {

// `header` is the plan summary's first line (device, precision); `multiprocessors` sizes the grid;
// `tc_options` picks the kernel's variant (CustomOptions::tc).
std::unique_ptr<Executable> make_tc_chain_executable(const Graph& graph, TcChainPlan plan,
                                                     const CompileOptions& options, const TcChainOptions& tc_options,
                                                     int multiprocessors, std::string header);

}  // namespace engine::custom::tc

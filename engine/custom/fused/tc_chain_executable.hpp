#pragma once
// The tensor-core chain at run time (issue 15: --precision fp16 | bf16 | int8 on the custom backend):
// the converted (or quantized) weights on the device once, forward(n) = one kernel from the
// preprocessed input to the output on the executable's stream.
#include <memory>
#include <string>

#include "engine/core/backend.hpp"
#include "engine/custom/fused/tc_chain_plan.hpp"

namespace engine::custom::tc {

// `header` is the plan summary's first line (device, precision); `multiprocessors` sizes the grid.
std::unique_ptr<Executable> make_tc_chain_executable(const Graph& graph, TcChainPlan plan,
                                                     const CompileOptions& options, int multiprocessors,
                                                     std::string header);

}  // namespace engine::custom::tc

#pragma once
// The tensor-core general path at run time (tc_general_plan.hpp): packed weights uploaded once, the
// plan's 16-bit activation buffers and the fp32 logits of a final softmax
// allocated once; forward(n) = one tc_dense_forward per dense / conv2d layer (each with the block
// tile chosen for its rows, any giving the same bits), one tc_pool_forward per pool (+ the
// softmax) on the executable's stream.
#include <memory>
#include <string>

#include "engine/core/backend.hpp"
#include "engine/custom/custom_options.hpp"
#include "engine/custom/tc_general/tc_general_plan.hpp"

namespace engine::custom::tcg {

// `multiprocessors` picks the tiles; `header`: the plan summary's first line (device, precision);
// `why_not_chain`: why the tensor-core chain does not run this graph.
std::unique_ptr<Executable> make_tc_general_executable(const Graph& graph, TcgPlan plan, const CompileOptions& options,
                                                       const TcGeneralOptions& tcg_options, int multiprocessors,
                                                       std::string header, std::string why_not_chain);

}  // namespace engine::custom::tcg

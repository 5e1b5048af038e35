#pragma once
// The checks a Model must pass whether it came from a file (load_model) or was built in code
// (validate_model), shared so both report the same problems in the same words.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model.hpp"

namespace formats {

// model-format-v1.md: no per-sample value may have more elements than this.
inline constexpr int64_t kMaxValueElements = 2147483647;  // 2^31 - 1
// model-format-v1.md: at most this many nodes (planning is quadratic in the node count).
inline constexpr size_t kMaxNodes = 4096;

std::string node_label(const Node& node);  // "node 'c1'"

// Input name, dtype/preprocess consistency, raw shape, preprocess values; sets input.shape.
void check_input(InputSpec& input, const std::string& origin);

// Input count for the op, attribute ranges (kernel, stride, padding, channels, units).
void check_node_attributes(const Node& node, const std::string& origin);

// Unique names, known inputs, valid outputs, acyclic graph. Sorts model.nodes topologically,
// keeping file order among independent nodes, and returns the permutation: sorted[i] was
// nodes[order[i]] before the call.
std::vector<size_t> check_names_and_sort(Model& model, const std::string& origin);

// Propagates shapes through the sorted nodes, checking each op's rank and size rules and its
// weight/bias tensors; fills every node's output_shape; checks the labels' length.
void propagate_shapes(Model& model, const std::string& origin);

}  // namespace formats

#pragma once
// The planned graph a backend receives whole (as ggml's graph_compute does), so it can fuse nodes
// or replace the whole network with one kernel. Planning is backend-neutral: value ids, per-sample
// sizes, consumers, and an activation arena laid out by liveness.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/model.hpp"

namespace engine {

using formats::OpType;
using formats::Shape;

struct Value {
  std::string name;
  Shape shape;               // per sample
  int64_t elements = 0;      // per sample
  int producer = -1;         // node index; -1 for the graph input
  std::vector<int> consumers;  // node indices, ascending
  int last_use = -1;         // last node index reading it; nodes.size() for graph outputs
  bool is_output = false;
  // Where the value lives in the activation arena, in floats per sample of capacity: a backend
  // planned for max_batch B places the value's [B, elements] block at arena + arena_offset * B.
  // Aliases (flatten) share their source's offset.
  int64_t arena_offset = 0;
  int alias_of = -1;         // value id whose storage this one reinterprets, or -1
  // False for a value that lives only inside a fusion group's kernel (fuse_groups): it has no
  // arena block, and nothing outside the group may read it.
  bool materialized = true;
};

struct PlannedNode {
  const formats::Node* node = nullptr;  // points into Graph::model
  std::vector<int> inputs;              // value ids
  int output = -1;                      // value id
};

// Nodes a backend runs as one step (one kernel, or a few launched back to back): an activation in
// a conv2d epilogue, a whole conv chain. Decided by the planner from the backend's rules
// (fuse_groups); the arena is laid out once for the fused schedule.
struct FusionGroup {
  std::vector<int> nodes;  // node indices, ascending; the group runs at the step of nodes.front()
  std::string kind;        // the backend's name for what runs it, e.g. "conv2d+tanh"
};

struct Graph {
  std::shared_ptr<const formats::Model> model;
  std::vector<Value> values;
  std::vector<PlannedNode> nodes;  // execution order (topological)
  int input = -1;                  // value id of the (preprocessed) graph input
  std::vector<int> outputs;        // value ids, in the model's output order
  int64_t arena_floats_per_sample = 0;
  std::vector<FusionGroup> groups;  // empty: every node runs alone
  std::vector<int> group_of;        // per node: index into groups, or -1 (empty when no groups)

  const Value& value(int id) const { return values.at(id); }
  // The value whose storage `id` shares: itself, or the source of a flatten alias (aliases always
  // point at a non-alias, but a chain would be followed too).
  int storage_root(int id) const {
    while (values.at(size_t(id)).alias_of >= 0) id = values[size_t(id)].alias_of;
    return id;
  }
  int64_t output_elements(size_t i) const { return values.at(outputs.at(i)).elements; }
};

// Builds the plan: values, consumers, liveness, arena offsets (greedy first-fit by lifetime; a
// value's block is never reused while a later node may still read it).
Graph plan_graph(std::shared_ptr<const formats::Model> model);

// The plan with `groups` fused: each group runs as one step at its first node; a value produced in a
// group and read only inside it (through any alias), and not a graph output, is not materialised;
// the arena is laid out again by first-fit over the fused schedule's lifetimes, so every block a
// group writes is free while any of the group's nodes runs. Throws std::invalid_argument for an
// invalid group (overlapping groups, a node reading a value produced after the group's start by a
// node outside it).
Graph fuse_groups(const Graph& graph, std::vector<FusionGroup> groups);

// The node index at which node i runs in the fused schedule (its group's first node, or i).
int step_of(const Graph& graph, int node);

// Plan-time resource limits (formats/README.md, "Resource limits"). A model that follows the format
// (which allows per-sample values of up to 2^31 - 1 elements) can still ask for absurd memory or
// work, e.g. a weight-free maxpool with a 65536 x 65536 window and padding just under it: a few
// hundred bytes of JSON. plan_graph refuses such a model with a clear std::invalid_argument instead
// of letting a backend allocate gigabytes or compute for days.
inline constexpr int64_t kMaxArenaFloatsPerSample = int64_t{1} << 28;   // 1 GiB of float32 activations
inline constexpr int64_t kMaxMultiplyAddsPerSample = int64_t{1} << 36;  // about 6.9e10
// conv2d / pooling: a padded input side (H + pad_top + pad_bottom, W + pad_left + pad_right) and a
// window's area (kh * kw) at most this, so that backends' 32-bit window arithmetic cannot overflow.
inline constexpr int64_t kMaxWindowExtent = 2147483647;

}  // namespace engine

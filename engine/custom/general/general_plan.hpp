#pragma once
// The custom backend's general fp32 path: the plan for any graph format v1 can hold (host side, no
// CUDA calls). Every conv2d and dense node becomes one implicit-GEMM kernel (conv_gemm.hpp) that
// also runs what follows it while the value has no other reader: activations, scale_shift, the add
// of a residual computed earlier, a 2x2 stride-2 max pool, and the write into its slice of a
// concat. Every other node runs the backend's per-node kernel for its op. Flatten is a view (the
// whole plan is NCHW, the graph's flatten order).
//
// Storage: the graph's input and outputs stay in the executable's arena; every other value the
// plan materialises gets a block of one buffer laid out first-fit by the plan's own step lifetimes
// (a value written into a concat's slice lives in the concat's block).
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/general/conv_gemm.hpp"

namespace engine::custom::general {

// Where a value lives: block `block` of GeneralPlan::blocks, `offset` floats into each sample.
struct View {
  int block = -1;
  int64_t offset = 0;
};

struct Block {
  int arena_value = -1;  // >= 0: the executable's arena block of this value; else the plan's buffer
  int64_t floats = 0;    // per sample (the stride between samples)
  int64_t offset = 0;    // in the plan's buffer, floats per sample of capacity
  int first = -1, last = -1;  // steps that touch it
};

struct StagePlan {
  StageKind kind = StageKind::Act;
  Activation act = Activation::None;
  int node = -1;       // ScaleShift: the node holding scale and shift
  int residual = -1;   // Add: the value added
};

struct GemmStep {
  GemmShape shape;
  int x = -1, y = -1;  // values: the input, and the value the epilogue writes
  std::vector<StagePlan> stages;
  int pool_at = -1;
  int bias_node = -1;          // the conv2d/dense node (its bias, if any)
  std::vector<float> weight;   // [K padded to kGemmBk][oc_padded]
  int oc_padded = 0;
  GemmChunks chunks;           // from the layer's shape alone (plan_gemm_chunks)
  std::vector<int> k_table;    // conv: 4 ints per k of the padded K (conv_gemm.hpp); dense: empty
};
struct PoolStep {
  int x = -1, y = -1;
  bool max = true;
};
struct UnaryStep {  // activation
  int x = -1, y = -1;
  Activation act = Activation::None;
};
struct AddStep {
  int a = -1, b = -1, y = -1;
};
struct ScaleShiftStep {
  int x = -1, y = -1;
};
struct SoftmaxStep {
  int x = -1, y = -1;
};
struct ConcatStep {  // copies the inputs that were not written into their slices in place
  int y = -1;
  std::vector<int> inputs;
  std::vector<int64_t> offsets;
};
using StepOp = std::variant<GemmStep, PoolStep, UnaryStep, AddStep, ScaleShiftStep, SoftmaxStep, ConcatStep>;

struct Step {
  int node = -1;        // the node it runs (a GEMM: the conv2d/dense node)
  std::string context;  // names the node and everything fused into it, for errors and the summary
  StepOp op;
};

struct GeneralPlan {
  Graph graph;  // one fusion group of every node: only the input and the outputs live in the arena
  std::vector<Step> steps;
  std::vector<View> views;    // per value (block -1: a value no step materialises)
  std::vector<Block> blocks;
  int64_t buffer_floats = 0;  // per sample of capacity, the plan's own buffer
  int fused_nodes = 0;        // nodes run inside a GEMM's epilogue
  int in_place_slices = 0;    // concat inputs written straight into their slice
};

// `chunks`: how a layer's K is cut (plan_gemm_chunks).
GeneralPlan plan_general(const Graph& graph, const ChunkRule& chunks = {});

}  // namespace engine::custom::general

#include "engine/core/graph.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace engine {
namespace {

// Block offsets and sizes are rounded up to this many floats per sample: a value's block starts
// at arena + offset * B, so any batch capacity B keeps every block 128-byte aligned, which the GPU
// backends' vectorised loads and cuDNN's tensor descriptors want.
constexpr int64_t kArenaAlignFloats = 32;

int64_t align_up(int64_t n) { return (n + kArenaAlignFloats - 1) / kArenaAlignFloats * kArenaAlignFloats; }

// The storage a non-alias value needs: from the step that writes it (-1 for the graph input, which
// is written before the first node) to the last step that reads it or any alias of it.
struct Lifetime {
  int value = -1;
  int first = 0;  // node index that writes it
  int last = 0;   // last node index that reads it (through any alias); nodes.size() for outputs
  int64_t size = 0;
};

// Greedy first-fit, largest block first (TFLite's "greedy by size"): each block goes to the
// lowest offset that overlaps no already placed block whose lifetime meets its own. Placing the big
// blocks first keeps small ones from fragmenting the arena (LeNet-5: 2 x 4704 floats instead of
// 1024 + 2 x 4704 when placed in definition order). Lifetimes that merely touch (one ends at node
// i, the other starts there) still conflict, because node i reads its inputs while it writes its
// output: a block is reused only once no later node reads it.
int64_t assign_offsets(const std::vector<Lifetime>& lifetimes, std::vector<int64_t>& offsets) {
  std::vector<size_t> order(lifetimes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lifetimes[a].size > lifetimes[b].size; });

  int64_t arena = 0;
  offsets.assign(lifetimes.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of conflicting blocks
    for (size_t j : placed) {
      const bool meet = lifetimes[j].first <= lifetimes[i].last && lifetimes[i].first <= lifetimes[j].last;
      if (meet) busy.emplace_back(offsets[j], offsets[j] + lifetimes[j].size);
    }
    std::sort(busy.begin(), busy.end());
    int64_t candidate = 0;
    for (const auto& [begin, end] : busy) {
      if (candidate + lifetimes[i].size <= begin) break;
      candidate = std::max(candidate, end);
    }
    offsets[i] = candidate;
    placed.push_back(i);
    arena = std::max(arena, candidate + lifetimes[i].size);
  }
  return arena;
}

}  // namespace

int step_of(const Graph& g, int node) {
  if (g.group_of.empty() || g.group_of[size_t(node)] < 0) return node;
  return g.groups[size_t(g.group_of[size_t(node)])].nodes.front();
}

namespace {

// Storage lifetimes by step of the (possibly fused) schedule, then first-fit offsets. An alias
// extends its source's lifetime to its own last reader; a value nobody reads is still written by
// its producer, so it lives for that one step. Values not materialised get no block.
void lay_out_arena(Graph& g) {
  const int node_count = int(g.nodes.size());
  std::vector<int> storage_index(g.values.size(), -1);
  std::vector<Lifetime> lifetimes;
  auto last_step = [&](const Value& v) {
    int last = -1;
    for (int c : v.consumers) last = std::max(last, step_of(g, c));
    if (v.is_output) last = node_count;
    return last;
  };
  for (size_t id = 0; id < g.values.size(); ++id) {
    const Value& v = g.values[id];
    if (v.alias_of >= 0 || !v.materialized) continue;
    storage_index[id] = int(lifetimes.size());
    const int first = v.producer < 0 ? -1 : step_of(g, v.producer);
    lifetimes.push_back(Lifetime{int(id), first, std::max(first, last_step(v)), align_up(v.elements)});
  }
  for (const Value& v : g.values) {
    if (v.alias_of < 0 || storage_index[size_t(v.alias_of)] < 0) continue;
    Lifetime& root = lifetimes[size_t(storage_index[size_t(v.alias_of)])];
    root.last = std::max(root.last, last_step(v));
  }
  std::vector<int64_t> offsets;
  g.arena_floats_per_sample = assign_offsets(lifetimes, offsets);
  if (g.arena_floats_per_sample > kMaxArenaFloatsPerSample)
    throw std::invalid_argument(fmt::format(
        "model '{}': its activations need {} floats ({:.1f} MiB) per sample, more than the engine's limit of "
        "{} MiB per sample",
        g.model->name, g.arena_floats_per_sample, double(g.arena_floats_per_sample) * 4 / (1 << 20),
        kMaxArenaFloatsPerSample * 4 / (1 << 20)));
  for (Value& v : g.values) v.arena_offset = 0;  // values not materialised: never read or written
  for (size_t i = 0; i < lifetimes.size(); ++i) g.values[size_t(lifetimes[i].value)].arena_offset = offsets[i];
  for (Value& v : g.values)
    if (v.alias_of >= 0) v.arena_offset = g.values[size_t(v.alias_of)].arena_offset;
}

}  // namespace

Graph fuse_groups(const Graph& graph, std::vector<FusionGroup> groups) {
  Graph g = graph;
  const int node_count = int(g.nodes.size());
  g.groups.clear();
  g.group_of.assign(size_t(node_count), -1);
  for (FusionGroup& group : groups) {
    if (group.nodes.empty()) continue;
    std::sort(group.nodes.begin(), group.nodes.end());
    const int index = int(g.groups.size());
    for (int n : group.nodes) {
      if (n < 0 || n >= node_count)
        throw std::invalid_argument(fmt::format("fusion group '{}': node index {} out of range", group.kind, n));
      if (g.group_of[size_t(n)] >= 0)
        throw std::invalid_argument(fmt::format("fusion group '{}': node '{}' is already in group '{}'", group.kind,
                                                g.nodes[size_t(n)].node->name,
                                                g.groups[size_t(g.group_of[size_t(n)])].kind));
      g.group_of[size_t(n)] = index;
    }
    g.groups.push_back(std::move(group));
  }
  // Running a group at its first node is valid only if each member reads values made before that
  // step or inside the group.
  for (const FusionGroup& group : g.groups) {
    const int start = group.nodes.front();
    for (int n : group.nodes)
      for (int in : g.nodes[size_t(n)].inputs) {
        const int producer = g.values[size_t(in)].producer;
        if (producer >= start && g.group_of[size_t(producer)] != g.group_of[size_t(n)])
          throw std::invalid_argument(fmt::format(
              "fusion group '{}': node '{}' reads '{}', made by node '{}' outside the group after the group starts",
              group.kind, g.nodes[size_t(n)].node->name, g.values[size_t(in)].name,
              g.nodes[size_t(producer)].node->name));
      }
  }
  // A storage root is materialised unless it is made in a group and every reader of it and of its
  // aliases is in that same group, and none of them is a graph output.
  std::vector<bool> needed(g.values.size(), false);
  for (size_t id = 0; id < g.values.size(); ++id) {
    const Value& v = g.values[id];
    const size_t root = v.alias_of >= 0 ? size_t(v.alias_of) : id;
    const Value& r = g.values[root];
    const int home = r.producer < 0 ? -1 : g.group_of[size_t(r.producer)];
    bool inside = home >= 0 && !v.is_output;
    for (int c : v.consumers) inside = inside && g.group_of[size_t(c)] == home;
    if (!inside) needed[root] = true;
  }
  for (size_t id = 0; id < g.values.size(); ++id) {
    const size_t root = g.values[id].alias_of >= 0 ? size_t(g.values[id].alias_of) : id;
    g.values[id].materialized = needed[root];
  }
  lay_out_arena(g);
  return g;
}

Graph plan_graph(std::shared_ptr<const formats::Model> model) {
  if (!model) throw std::invalid_argument("plan_graph: no model");
  Graph g;
  g.model = model;
  const int node_count = int(model->nodes.size());

  std::map<std::string, int> ids;
  auto add_value = [&](const std::string& name, const Shape& shape, int producer) {
    if (!ids.emplace(name, int(g.values.size())).second)
      throw std::invalid_argument(fmt::format("model '{}': value '{}' is defined twice", model->name, name));
    Value v;
    v.name = name;
    v.shape = shape;
    v.elements = formats::element_count(shape);
    v.producer = producer;
    g.values.push_back(std::move(v));
    return int(g.values.size()) - 1;
  };
  auto lookup = [&](const std::string& name, const std::string& user) {
    auto it = ids.find(name);
    if (it == ids.end())
      throw std::invalid_argument(
          fmt::format("model '{}': {} reads value '{}' before it is defined", model->name, user, name));
    return it->second;
  };

  g.input = add_value(model->input.name, model->input.shape, -1);
  for (int n = 0; n < node_count; ++n) {
    const formats::Node& node = model->nodes[n];
    PlannedNode planned;
    planned.node = &node;
    for (const auto& in : node.inputs) {
      const int id = lookup(in, fmt::format("node '{}'", node.name));
      planned.inputs.push_back(id);
      // A node reading the same value twice (add(x, x)) is still one consumer.
      auto& consumers = g.values[id].consumers;
      if (consumers.empty() || consumers.back() != n) consumers.push_back(n);
      g.values[id].last_use = n;
    }
    planned.output = add_value(node.name, node.output_shape, n);
    if (node.op == OpType::Flatten) {
      const Value& src = g.values[planned.inputs.at(0)];
      if (src.elements != g.values[planned.output].elements)
        throw std::invalid_argument(fmt::format("model '{}': flatten '{}' changes the element count",
                                                model->name, node.name));
      g.values[planned.output].alias_of = src.alias_of >= 0 ? src.alias_of : planned.inputs[0];
    }
    g.nodes.push_back(std::move(planned));
  }
  for (const auto& name : model->outputs) {
    const int id = lookup(name, "the output list");
    g.values[id].is_output = true;
    g.values[id].last_use = node_count;
    g.outputs.push_back(id);
  }

  // Work per sample as the reference loops do it (one multiply-add per window or input element
  // per output element), overflow-checked, against the limit.
  int64_t work = 0;
  for (const PlannedNode& planned : g.nodes) {
    const formats::Node& node = *planned.node;
    const Value& in = g.values[planned.inputs.at(0)];
    int64_t per_output = 1;
    bool overflow = false;
    if (node.op == OpType::Conv2D || node.op == OpType::AvgPool || node.op == OpType::MaxPool) {
      // Backends index windows with 32-bit ints (CUDA kernels, cuDNN descriptors): the padded input
      // and the window's area must fit, or `i * stride - pad` and `kh * kw` overflow.
      const formats::Window2D& w = node.window;
      const int64_t padded_h = in.shape.at(1) + w.pad_top + w.pad_bottom, padded_w = in.shape.at(2) + w.pad_left + w.pad_right;
      if (padded_h > kMaxWindowExtent || padded_w > kMaxWindowExtent ||
          int64_t{w.kernel_h} * w.kernel_w > kMaxWindowExtent)
        throw std::invalid_argument(fmt::format(
            "model '{}': node '{}' ({}): padded input {}x{} with a {}x{} window exceeds the engine's limit of {} "
            "for a padded side and for a window's area",
            model->name, node.name, formats::op_name(node.op), padded_h, padded_w, w.kernel_h, w.kernel_w,
            kMaxWindowExtent));
      overflow = __builtin_mul_overflow(int64_t{node.window.kernel_h}, int64_t{node.window.kernel_w}, &per_output) ||
                 (node.op == OpType::Conv2D && __builtin_mul_overflow(per_output, in.shape.at(0), &per_output));
    } else if (node.op == OpType::Dense) {
      per_output = in.elements;
    }
    int64_t node_work = 0;
    overflow = overflow || __builtin_mul_overflow(g.values[planned.output].elements, per_output, &node_work) ||
               __builtin_add_overflow(work, node_work, &work);
    if (overflow || work > kMaxMultiplyAddsPerSample)
      throw std::invalid_argument(fmt::format(
          "model '{}': node '{}' ({}, output {}) brings the work per sample past the engine's limit of {} "
          "multiply-adds",
          model->name, node.name, formats::op_name(node.op), formats::shape_to_string(node.output_shape),
          kMaxMultiplyAddsPerSample));
  }

  lay_out_arena(g);
  return g;
}

}  // namespace engine

#include "engine/custom/general/general_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "engine/custom/node_shapes.hpp"

namespace engine::custom::general {
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The node that reads `value`, when it is its only reader and the value is not a graph output.
int only_reader(const Graph& g, int value) {
  const Value& v = g.value(value);
  if (v.is_output || v.consumers.size() != 1) return -1;
  return v.consumers[0];
}

// A max pool the GEMM epilogue can run: 2x2 windows, stride 2, no padding (the output then covers
// the even part of the conv output).
bool fusable_pool(const formats::Node& n, const Value& in, const Value& out) {
  const formats::Window2D& w = n.window;
  return n.op == OpType::MaxPool && w.kernel_h == 2 && w.kernel_w == 2 && w.stride_h == 2 && w.stride_w == 2 &&
         w.pad_top == 0 && w.pad_left == 0 && w.pad_bottom == 0 && w.pad_right == 0 && in.shape.size() == 3 &&
         out.shape.size() == 3 && out.shape[1] == in.shape[1] / 2 && out.shape[2] == in.shape[2] / 2 &&
         out.shape[1] >= 1 && out.shape[2] >= 1;
}

GemmShape gemm_shape(const formats::Node& node, const Value& in, const Value& out) {
  GemmShape s;
  if (node.op == OpType::Dense) {
    s.dense = true;
    s.channels = int(in.elements);
    s.out_channels = int(out.elements);
    return s;
  }
  set_windowed_shape(s, node, in, out);
  return s;
}

// Weights [OC][K] (conv OIHW, dense [units][in]) as the kernel reads them: [K padded][OC padded],
// zeros in the padding (a zero row adds fmaf(0, 0, acc), the same for every tile).
void pack_weights(const formats::Node& node, GemmStep& step) {
  const int64_t K = step.shape.k(), oc = step.shape.out_channels;
  step.oc_padded = int(round_up(oc, kMaxTileN));
  const int64_t kp = round_up(K, kGemmBk);
  const std::vector<float>& w = node.weight->values;
  if (int64_t(w.size()) != oc * K)
    throw std::invalid_argument(fmt::format("custom: node '{}': weight holds {} values, expected {} x {}", node.name,
                                            w.size(), oc, K));
  step.weight.assign(size_t(kp * step.oc_padded), 0.0f);
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t k = 0; k < K; ++k) step.weight[size_t(k * step.oc_padded + o)] = w[size_t(o * K + k)];
  if (step.shape.dense) return;
  const GemmShape& s = step.shape;
  step.k_table.reserve(size_t(kp) * 4);
  for (int c = 0; c < s.channels; ++c)
    for (int p = 0; p < s.kernel_h; ++p)
      for (int q = 0; q < s.kernel_w; ++q)
        step.k_table.insert(step.k_table.end(), {c * s.height * s.width, p, q, (c * s.height + p) * s.width + q});
  // Past K up to the padded K: a window row no input has, so that the loader needs no test of k.
  for (int64_t k = K; k < kp; ++k) step.k_table.insert(step.k_table.end(), {0, kKTableNoRow, 0, 0});
}

}  // namespace

GeneralPlan plan_general(const Graph& graph, const ChunkRule& chunks) {
  GeneralPlan plan;
  {
    FusionGroup all{{}, "general fp32 path"};
    all.nodes.resize(graph.nodes.size());
    std::iota(all.nodes.begin(), all.nodes.end(), 0);
    plan.graph = fuse_groups(graph, {std::move(all)});
  }
  const Graph& g = plan.graph;
  const int count = int(g.nodes.size());
  const size_t value_count = g.values.size();
  std::vector<bool> absorbed(size_t(count), false);
  std::vector<bool> gemm_written(value_count, false);
  std::vector<int> flatten_of(value_count, -1), slice_parent(value_count, -1);
  std::vector<int64_t> slice_offset(value_count, 0);

  for (int i = 0; i < count; ++i) {
    if (absorbed[size_t(i)]) continue;
    const PlannedNode& pn = g.nodes[size_t(i)];
    const formats::Node& node = *pn.node;
    const Value& in = g.value(pn.inputs.at(0));
    std::string context = fmt::format("node '{}' ({}", node.name, formats::op_name(node.op));
    Step step;
    step.node = i;
    switch (node.op) {
      case OpType::Conv2D:
      case OpType::Dense: {
        GemmStep gs;
        gs.shape = gemm_shape(node, in, g.value(pn.output));
        gs.x = pn.inputs[0];
        gs.bias_node = i;
        pack_weights(node, gs);
        int cur = pn.output;
        for (;;) {
          const int c = only_reader(g, cur);
          if (c < 0) break;
          const PlannedNode& cp = g.nodes[size_t(c)];
          const formats::Node& cn = *cp.node;
          const bool room = int(gs.stages.size()) < kMaxStages;
          if (const auto act = activation_of(cn.op); act && room) {
            gs.stages.push_back(StagePlan{StageKind::Act, *act, -1, -1});
          } else if (cn.op == OpType::ScaleShift && room) {
            gs.stages.push_back(StagePlan{StageKind::ScaleShift, Activation::None, c, -1});
          } else if (cn.op == OpType::Add && room && cp.inputs.at(0) != cp.inputs.at(1)) {
            const int other = cp.inputs[0] == cur ? cp.inputs[1] : cp.inputs[0];
            if (g.value(other).producer >= i) break;  // not computed yet when this kernel runs
            gs.stages.push_back(StagePlan{StageKind::Add, Activation::None, -1, other});
          } else if (!gs.shape.dense && gs.pool_at < 0 && fusable_pool(cn, g.value(cur), g.value(cp.output))) {
            gs.pool_at = int(gs.stages.size());
          } else {
            break;
          }
          absorbed[size_t(c)] = true;
          ++plan.fused_nodes;
          context += fmt::format(" + {} '{}'", formats::op_name(cn.op), cn.name);
          cur = cp.output;
        }
        gs.y = cur;
        gs.chunks = plan_gemm_chunks(gs.shape, gs.pool_at >= 0, chunks);
        gemm_written[size_t(cur)] = true;
        step.op = std::move(gs);
        break;
      }
      case OpType::MaxPool:
      case OpType::AvgPool: step.op = PoolStep{pn.inputs[0], pn.output, node.op == OpType::MaxPool}; break;
      case OpType::Relu:
      case OpType::Tanh:
      case OpType::Sigmoid: step.op = UnaryStep{pn.inputs[0], pn.output, *activation_of(node.op)}; break;
      case OpType::Add: step.op = AddStep{pn.inputs.at(0), pn.inputs.at(1), pn.output}; break;
      case OpType::ScaleShift: step.op = ScaleShiftStep{pn.inputs[0], pn.output}; break;
      case OpType::Softmax: step.op = SoftmaxStep{pn.inputs[0], pn.output}; break;
      case OpType::Flatten: flatten_of[size_t(pn.output)] = pn.inputs[0]; continue;
      case OpType::Concat: {
        ConcatStep cs;
        cs.y = pn.output;
        int64_t offset = 0;
        for (int v : pn.inputs) {
          const bool once = std::count(pn.inputs.begin(), pn.inputs.end(), v) == 1;
          if (gemm_written[size_t(v)] && only_reader(g, v) == i && once) {
            slice_parent[size_t(v)] = pn.output;
            slice_offset[size_t(v)] = offset;
            ++plan.in_place_slices;
          } else {
            cs.inputs.push_back(v);
            cs.offsets.push_back(offset);
          }
          offset += g.value(v).elements;
        }
        if (offset != g.value(pn.output).elements)
          throw std::logic_error(fmt::format("custom: node '{}': inputs hold {} floats per sample, the output {}",
                                             node.name, offset, g.value(pn.output).elements));
        step.op = std::move(cs);
        break;
      }
    }
    step.context = context + ")";
    plan.steps.push_back(std::move(step));
  }

  // Views: a flatten shares its input's, a concat input written in place is a slice of the concat's.
  plan.views.assign(value_count, View{});
  std::function<const View&(int)> resolve = [&](int v) -> const View& {
    View& view = plan.views[size_t(v)];
    if (view.block >= 0) return view;
    if (flatten_of[size_t(v)] >= 0) {
      view = resolve(flatten_of[size_t(v)]);
    } else if (slice_parent[size_t(v)] >= 0) {
      const View parent = resolve(slice_parent[size_t(v)]);
      view = View{parent.block, parent.offset + slice_offset[size_t(v)]};
    } else {
      Block b;
      b.arena_value = g.value(v).materialized ? v : -1;
      b.floats = g.value(v).elements;
      plan.blocks.push_back(b);
      view = View{int(plan.blocks.size()) - 1, 0};
    }
    return view;
  };
  auto touch = [&](int v, int t) {
    Block& b = plan.blocks[size_t(resolve(v).block)];
    b.first = b.first < 0 ? t : std::min(b.first, t);
    b.last = std::max(b.last, t);
  };
  for (int t = 0; t < int(plan.steps.size()); ++t) {
    std::visit(
        [&](const auto& op) {
          using T = std::decay_t<decltype(op)>;
          if constexpr (std::is_same_v<T, GemmStep>) {
            touch(op.x, t);
            touch(op.y, t);
            for (const StagePlan& s : op.stages)
              if (s.residual >= 0) touch(s.residual, t);
          } else if constexpr (std::is_same_v<T, AddStep>) {
            touch(op.a, t), touch(op.b, t), touch(op.y, t);
          } else if constexpr (std::is_same_v<T, ConcatStep>) {
            touch(op.y, t);
            for (int v : op.inputs) touch(v, t);
          } else {
            touch(op.x, t), touch(op.y, t);
          }
        },
        plan.steps[size_t(t)].op);
  }
  for (int v : g.outputs) resolve(v);  // an output no step writes (the input itself) still has a view

  // First fit by lifetime: a block may share space only with blocks whose steps it never meets.
  std::vector<int> order;
  for (int b = 0; b < int(plan.blocks.size()); ++b)
    if (plan.blocks[size_t(b)].arena_value < 0) order.push_back(b);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return plan.blocks[size_t(a)].floats != plan.blocks[size_t(b)].floats
               ? plan.blocks[size_t(a)].floats > plan.blocks[size_t(b)].floats
               : a < b;
  });
  std::vector<int> placed;
  for (int b : order) {
    Block& blk = plan.blocks[size_t(b)];
    std::vector<int> meets;
    for (int p : placed) {
      const Block& o = plan.blocks[size_t(p)];
      if (o.first <= blk.last && blk.first <= o.last) meets.push_back(p);
    }
    std::vector<int64_t> candidates{0};
    // Offsets a multiple of 4 floats: a block's rows of a multiple of 4 floats stay 16-byte aligned
    // (the dense loader's 16-byte copies).
    for (int p : meets)
      candidates.push_back((plan.blocks[size_t(p)].offset + plan.blocks[size_t(p)].floats + 3) / 4 * 4);
    std::sort(candidates.begin(), candidates.end());
    for (int64_t at : candidates) {
      bool free = true;
      for (int p : meets) {
        const Block& o = plan.blocks[size_t(p)];
        free = free && (at + blk.floats <= o.offset || o.offset + o.floats <= at);
      }
      if (free) {
        blk.offset = at;
        break;
      }
    }
    plan.buffer_floats = std::max(plan.buffer_floats, blk.offset + blk.floats);
    placed.push_back(b);
  }
  return plan;
}

}  // namespace engine::custom::general

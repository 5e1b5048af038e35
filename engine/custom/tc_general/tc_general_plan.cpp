#include "engine/custom/tc_general/tc_general_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>

#include "engine/custom/node_shapes.hpp"
#include "engine/custom/tc_gemm_weights.hpp"

namespace engine::custom::tcg {
namespace {

int round_up(int v, int m) { return (v + m - 1) / m * m; }

std::string refuse(const formats::Node& node, const std::string& why) {
  return fmt::format("node '{}' ({}): {}", node.name, formats::op_name(node.op), why);
}

// How a value is stored: the fp32 input (NCHW), 16-bit NHWC pixels or 16-bit rows.
enum class Store { Input, Pixels, Rows };

struct Stored {
  Store store = Store::Input;
  int buffer = -1;          // TcgPlan::buffers index; -1: the graph input
  int pitch = 0;            // 16-bit elements per pixel (Pixels) or row (Rows)
  int channels = 0, height = 0, width = 0;  // an image's (Input, Pixels)
  bool flattened = false;
};

// The window and sizes of a conv2d or pool from its [C, H, W] input and output; pitch: the input's
// channels as stored.
TcConvGeometry geometry(const formats::Node& node, const Value& in, const Value& out, int pitch) {
  TcConvGeometry g;
  g.kh = node.window.kernel_h, g.kw = node.window.kernel_w;
  g.sh = node.window.stride_h, g.sw = node.window.stride_w;
  g.pt = node.window.pad_top, g.pl = node.window.pad_left;
  g.h = int(in.shape.at(1)), g.w = int(in.shape.at(2));
  g.oh = int(out.shape.at(1)), g.ow = int(out.shape.at(2));
  g.pitch = pitch;
  return g;
}

// Biases rounded to the format (the emulation rounds them too), zeros in the padding.
std::vector<float> packed_bias(const formats::Node& node, int units, int rows_padded, bool bf16) {
  std::vector<float> bias(size_t(rows_padded), 0.0f);
  if (node.bias)
    for (int o = 0; o < units && o < int(node.bias->values.size()); ++o)
      bias[size_t(o)] = tc_round16(node.bias->values[size_t(o)], bf16);
  return bias;
}

}  // namespace

std::variant<TcgPlan, std::string> plan_tc_general(const Graph& graph, bool bf16, bool convolutions) {
  TcgPlan plan;
  plan.bf16 = bf16;
  plan.input_value = graph.input;
  if (graph.outputs.size() != 1) return fmt::format("{} graph outputs (this path writes one)", graph.outputs.size());
  const int nodes = int(graph.nodes.size());
  // Where each value lives; a fused activation's and a flatten's output share their input's storage.
  std::vector<std::optional<Stored>> at(graph.values.size());
  {
    Stored in;
    const Value& v = graph.value(graph.input);
    if (v.shape.size() == 3)
      in.channels = int(v.shape[0]), in.height = int(v.shape[1]), in.width = int(v.shape[2]);
    at[size_t(graph.input)] = in;
  }
  std::vector<int> buffer_free_after;  // per buffer: the last node reading it; nodes: free
  // A buffer free before node i (its values read by earlier nodes), else a new one; grown to
  // per_image, held until node `until`.
  auto take_buffer = [&](int i, long long per_image, int until) {
    int b = 0;
    while (b < int(plan.buffers.size()) && buffer_free_after[size_t(b)] >= i) ++b;
    if (b == int(plan.buffers.size())) plan.buffers.push_back(0), buffer_free_after.push_back(0);
    plan.buffers[size_t(b)] = std::max(plan.buffers[size_t(b)], per_image);
    buffer_free_after[size_t(b)] = until;
    return b;
  };
  auto hold = [&](const Stored& s, int until) {
    if (s.buffer >= 0) buffer_free_after[size_t(s.buffer)] = std::max(buffer_free_after[size_t(s.buffer)], until);
  };
  // The concat a conv2d's output (through a fused activation) is the only reader of, and its index
  // among the concat's inputs.
  auto concat_of = [&](int value) -> std::pair<int, int> {
    for (int hop = 0; hop < 2; ++hop) {
      const Value& v = graph.value(value);
      if (v.is_output || v.consumers.size() != 1) return {-1, -1};
      const PlannedNode& next = graph.nodes[size_t(v.consumers[0])];
      if (next.node->op == OpType::Concat) {
        for (size_t k = 0; k < next.inputs.size(); ++k)
          if (next.inputs[k] == value) return {v.consumers[0], int(k)};
        return {-1, -1};
      }
      if (hop > 0 || !activation_of(next.node->op)) return {-1, -1};
      value = next.output;
    }
    return {-1, -1};
  };
  for (int i = 0; i < nodes; ++i) {
    const PlannedNode& pn = graph.nodes[size_t(i)];
    const formats::Node& node = *pn.node;
    for (int v : pn.inputs)
      if (!at[size_t(v)])
        return refuse(node, fmt::format("its input '{}' is not one this path stores", graph.value(v).name));
    if (plan.softmax_node >= 0) return refuse(node, "follows the softmax (the softmax ends the graph)");
    const int cur = pn.inputs.at(0);
    const Value& in = graph.value(cur);
    const Value& out = graph.value(pn.output);
    const Stored src = *at[size_t(cur)];
    const bool spatial = in.shape.size() == 3 && out.shape.size() == 3;
    if (node.op == OpType::Flatten) {
      if (src.store == Store::Rows) return refuse(node, "a flatten after a dense layer");
      Stored s = src;
      s.flattened = true;
      at[size_t(pn.output)] = s;
      hold(s, out.last_use);
    } else if (node.op == OpType::Concat) {
      // Its inputs' conv2d layers wrote their slices already (concat_of); anything else is refused.
      const std::optional<Stored>& s = at[size_t(pn.output)];
      if (!s) return refuse(node, "its inputs are not all conv2d outputs (after their activations) with channels in "
                                  "multiples of 8 that only it reads");
      for (size_t k = 0; k < pn.inputs.size(); ++k) {
        const int v = pn.inputs[k];
        if (at[size_t(v)]->buffer != s->buffer || concat_of(v) != std::pair{i, int(k)})
          return refuse(node, fmt::format("its input '{}' is not a slice it owns", graph.value(v).name));
      }
      hold(*s, out.last_use);
    } else if (node.op == OpType::Add) {
      if (!convolutions) return refuse(node, "convolutions are off (TcGeneralOptions::convolutions)");
      if (plan.layers.empty() || pn.inputs.size() != 2 || pn.inputs[0] == pn.inputs[1])
        return refuse(node, "not an add of a conv2d layer's output and another value");
      TcgLayer& l = plan.layers.back();
      const int mine = graph.value(pn.inputs[0]).producer == l.tail ? 0 : 1;
      const Value& own = graph.value(pn.inputs[size_t(mine)]);
      const Stored other = *at[size_t(pn.inputs[size_t(1 - mine)])];
      if (l.kind != TcgKind::Conv || own.producer != l.tail || own.is_output || own.consumers.size() != 1 ||
          l.res_buffer >= 0 || l.out_offset != 0 || l.cols != l.ldy)
        return refuse(node, "not the only reader of a conv2d layer just before it");
      if (other.store != Store::Pixels || other.pitch != l.ldy || other.height != l.conv.oh ||
          other.width != l.conv.ow || other.channels != l.units)
        return refuse(node, "its other input is not stored pixels of the conv2d's shape");
      l.res_buffer = other.buffer;
      l.res_pitch = other.pitch;
      l.tail = i;
      l.context += fmt::format(" + add '{}'", node.name);
      at[size_t(pn.output)] = at[size_t(pn.inputs[size_t(mine)])];
      hold(*at[size_t(pn.output)], out.last_use);
    } else if (node.op == OpType::Conv2D || node.op == OpType::MaxPool || node.op == OpType::AvgPool) {
      if (!convolutions) return refuse(node, "convolutions are off (TcGeneralOptions::convolutions)");
      if (src.store == Store::Rows || src.flattened || !spatial) return refuse(node, "not on an image");
      if (src.store == Store::Input && node.op != OpType::Conv2D) return refuse(node, "a pool of the input");
      TcgLayer l;
      l.node = l.tail = i;
      l.first = src.store == Store::Input;
      l.in_buffer = src.buffer;
      l.rows_per_image = int(out.shape[1] * out.shape[2]);
      const int in_channels = int(in.shape[0]);
      l.conv = geometry(node, in, out, l.first ? in_channels : src.pitch);
      l.units = int(out.shape[0]);
      l.cols = node.op != OpType::Conv2D ? src.pitch : round_up(l.units, 8);
      l.ldy = l.cols;
      if (node.op != OpType::Conv2D) {
        l.kind = TcgKind::Pool;
        l.average = node.op == OpType::AvgPool;
        l.count_include_pad = node.count_include_pad;
        l.context = fmt::format("node '{}' ({}", node.name, formats::op_name(node.op));
      } else {
        const int taps = l.conv.kh * l.conv.kw;
        if (!node.weight || int64_t(node.weight->values.size()) != int64_t(l.units) * in_channels * taps)
          return refuse(node, "its weight does not hold out x in channels x taps values");
        l.kind = TcgKind::Conv;
        // fp32 input: k = (channel, tap), the model's order; 16-bit pixels: k = (tap, padded channel).
        l.in_features = l.first ? in_channels * taps : taps * src.pitch;
        l.k_padded = round_up(l.in_features, kTcgBk);
        l.rows_padded = round_up(l.units, kTcgRowAlign);
        l.weight.assign(size_t(l.rows_padded) * size_t(l.k_padded), tc_bits16(0.0f, bf16));
        for (int o = 0; o < l.units; ++o)
          for (int c = 0; c < in_channels; ++c)
            for (int t = 0; t < taps; ++t) {
              const int k = l.first ? c * taps + t : t * src.pitch + c;
              const size_t from = (size_t(o) * size_t(in_channels) + size_t(c)) * size_t(taps) + size_t(t);
              l.weight[size_t(o) * size_t(l.k_padded) + size_t(k)] = tc_bits16(node.weight->values[from], bf16);
            }
        l.bias = packed_bias(node, l.units, l.rows_padded, bf16);
        l.context = fmt::format("node '{}' (conv2d", node.name);
      }
      Stored s;
      s.store = Store::Pixels;
      s.channels = l.units, s.height = l.conv.oh, s.width = l.conv.ow, s.pitch = l.ldy;
      const auto [concat, slot] = node.op == OpType::Conv2D ? concat_of(pn.output) : std::pair{-1, -1};
      bool sliced = false;
      if (concat >= 0) {
        // Every input of the concat a same-sized image with channels in multiples of 8: this layer
        // writes channels [offset, offset + units) of the concat's pixels.
        const PlannedNode& cn = graph.nodes[size_t(concat)];
        int offset = 0, total = 0;
        bool fits = true;
        for (size_t k = 0; k < cn.inputs.size(); ++k) {
          const Value& v = graph.value(cn.inputs[k]);
          fits = fits && v.shape.size() == 3 && v.shape[0] % 8 == 0 && v.shape[1] == out.shape[1] &&
                 v.shape[2] == out.shape[2];
          if (fits && int(k) < slot) offset += int(v.shape[0]);
          if (fits) total += int(v.shape[0]);
        }
        if (fits) {
          std::optional<Stored>& cs = at[size_t(cn.output)];
          if (!cs) {
            Stored c = s;
            c.channels = c.pitch = total;
            c.buffer = take_buffer(i, (long long)l.rows_per_image * total, graph.value(cn.output).last_use);
            cs = c;
          }
          s.buffer = cs->buffer;
          s.pitch = total;
          l.ldy = total;
          l.out_offset = offset;
          sliced = true;
        }
      }
      if (!sliced) s.buffer = take_buffer(i, (long long)l.rows_per_image * l.ldy, out.last_use);
      l.out_buffer = s.buffer;
      at[size_t(pn.output)] = s;
      plan.layers.push_back(std::move(l));
    } else if (node.op == OpType::Dense) {
      if (!node.weight || int64_t(node.weight->values.size()) != in.elements * out.elements)
        return refuse(node, "its weight does not hold inputs x units values");
      if (src.store == Store::Pixels && in.elements != int64_t(src.channels) * src.height * src.width)
        return refuse(node, "its inputs are not the previous layer's pixels");
      TcgLayer l;
      l.node = l.tail = i;
      l.in_features = int(in.elements);
      l.units = int(out.elements);
      l.first = src.store == Store::Input;
      l.in_buffer = src.buffer;
      l.ldx = l.first ? l.in_features : src.store == Store::Pixels ? src.height * src.width * src.pitch : src.pitch;
      l.ldy = l.cols = round_up(l.units, 8);
      l.k_padded = round_up(l.ldx, kTcgBk);
      l.rows_padded = round_up(l.units, kTcgRowAlign);
      l.weight.assign(size_t(l.rows_padded) * size_t(l.k_padded), tc_bits16(0.0f, bf16));
      // After NHWC pixels the model's feature c * H * W + p (its NCHW flatten) is stored at p * pitch + c.
      const int plane = src.height * src.width;
      for (int o = 0; o < l.units; ++o)
        for (int k = 0; k < l.in_features; ++k) {
          const int to = src.store == Store::Pixels ? (k % plane) * src.pitch + k / plane : k;
          l.weight[size_t(o) * size_t(l.k_padded) + size_t(to)] =
              tc_bits16(node.weight->values[size_t(o) * size_t(l.in_features) + size_t(k)], bf16);
        }
      l.bias = packed_bias(node, l.units, l.rows_padded, bf16);
      l.context = fmt::format("node '{}' (dense", node.name);
      Stored s;
      s.store = Store::Rows;
      s.pitch = l.ldy;
      s.buffer = l.out_buffer = take_buffer(i, l.ldy, out.last_use);
      at[size_t(pn.output)] = s;
      plan.layers.push_back(std::move(l));
    } else if (const auto act = activation_of(node.op)) {
      TcgLayer* l = plan.layers.empty() ? nullptr : &plan.layers.back();
      const bool after_gemm = l && l->tail == in.producer && l->kind != TcgKind::Pool && !in.is_output &&
                              in.consumers.size() == 1;
      Activation* slot = !l ? nullptr : l->res_buffer >= 0 ? &l->post_act : &l->act;
      if (!after_gemm || *slot != Activation::None)
        return refuse(node, "an activation not the only reader of a dense or conv2d layer (or its add) just before it");
      *slot = *act;
      l->tail = i;
      l->context += fmt::format(" + {} '{}'", formats::op_name(node.op), node.name);
      at[size_t(pn.output)] = src;
      hold(src, out.last_use);
    } else if (node.op == OpType::Softmax) {
      if (src.store != Store::Rows || src.buffer != plan.layers.back().out_buffer || in.consumers.size() != 1 ||
          in.is_output)
        return refuse(node, "a softmax not the only reader of the dense layer just before it");
      plan.softmax_node = i;
      at[size_t(pn.output)] = src;
    } else {
      return refuse(node, convolutions ? "the tensor-core general path takes conv2d, pool, add, concat and dense "
                                         "layers so far"
                                       : "the tensor-core general path takes chains of dense layers (convolutions "
                                         "off)");
    }
  }
  if (plan.layers.empty()) return std::string("no dense layer");
  TcgLayer& last = plan.layers.back();
  if (last.kind != TcgKind::Dense) return std::string("the graph does not end with a dense layer");
  const int end = graph.nodes.back().output;
  if (graph.outputs[0] != end)
    return fmt::format("the graph output '{}' is not its last node's", graph.value(graph.outputs[0]).name);
  if (at[size_t(end)]->buffer != last.out_buffer || graph.value(end).consumers.size() > 0)
    return fmt::format("the graph output '{}' is not the last dense layer's alone", graph.value(end).name);
  plan.output_value = end;
  last.last = true;
  last.ldy = last.cols = last.units;
  last.out_buffer = -1;
  for (TcgLayer& l : plan.layers) l.context += ")";
  plan.nodes.resize(graph.nodes.size());
  std::iota(plan.nodes.begin(), plan.nodes.end(), 0);
  return plan;
}

}  // namespace engine::custom::tcg

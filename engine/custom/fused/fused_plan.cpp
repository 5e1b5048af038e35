#include "engine/custom/fused/fused_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace engine::custom::fused {
namespace {

using formats::OpType;

int round_up(int64_t v, int m) { return int((v + m - 1) / m * m); }

std::optional<Act> act_of(OpType op) {
  switch (op) {
    case OpType::Relu: return Act::Relu;
    case OpType::Tanh: return Act::Tanh;
    case OpType::Sigmoid: return Act::Sigmoid;
    default: return std::nullopt;
  }
}

const char* act_text(Act a) {
  switch (a) {
    case Act::Relu: return "relu";
    case Act::Tanh: return "tanh";
    case Act::Sigmoid: return "sigmoid";
    case Act::None: break;
  }
  return "none";
}

std::string epilogue_text(const Epilogue& e) {
  std::string s;
  for (int i = 0; i < e.count; ++i) s += std::string(" + ") + act_text(e.acts[i]);
  return s;
}

struct NotFused {
  std::string why;
};

void push_act(Epilogue& e, Act a, const formats::Node& node) {
  if (e.count == kMaxEpilogueActs)
    throw NotFused{fmt::format("node '{}': more than {} activations in a row", node.name, kMaxEpilogueActs)};
  e.add(a);
}

// Output channels per thread: the fewest padded channels, the larger block on a tie (the image
// chain: always kImageOcb).
int choose_ocb(int oc, bool tiled, bool image) {
  if (image) return kImageOcb;
  const std::vector<int> options = tiled ? std::vector<int>{8, 6, 4} : std::vector<int>{8, 4};
  int best = options.front();
  for (int b : options)
    if (round_up(oc, b) < round_up(oc, best)) best = b;
  return best;
}

ConvVariant conv_variant(bool tiled, int kernel_h, int ocb, bool image) {
  if (image) {
    if (tiled && kernel_h == 2) return ConvVariant::K2_2;
    if (tiled && kernel_h == 3) return ConvVariant::K3_2;
    if (tiled && kernel_h == 5) return ConvVariant::K5_2;
    return ConvVariant::Generic2;
  }
  const int idx = ocb == 4 ? 0 : ocb == 6 ? 1 : 2;
  if (tiled) {
    if (kernel_h == 2) return ConvVariant(int(ConvVariant::K2_4) + idx);
    if (kernel_h == 3) return ConvVariant(int(ConvVariant::K3_4) + idx);
    if (kernel_h == 5) return ConvVariant(int(ConvVariant::K5_4) + idx);
  }
  return ocb == 4 ? ConvVariant::Generic4 : ConvVariant::Generic8;
}

// Output rows per thread of a tiled conv with `oh` output rows: 4 (the better ratio of FMAs to
// shared-memory loads), or 2 where strips of 4 would compute rows past the output that strips of 2
// do not (LeNet-5's c3: 10 rows, 12 computed in strips of 4, 17 % of its FMAs wasted).
int choose_rows(int oh) {
  const int waste4 = round_up(oh, 4) - oh, waste2 = round_up(oh, 2) - oh;
  return waste2 < waste4 ? 2 : kConvRowsPerThread;
}

bool is_tiled(ConvVariant v) {
  return v != ConvVariant::Generic4 && v != ConvVariant::Generic8 && v != ConvVariant::Generic2;
}

struct SpatialNode {  // a conv2d or pool node and its place in the chain
  const formats::Node* node;
  int in_value, out_value;
};

// Lays out one smem tensor of per-image size for its consumer (a conv reads it padded).
SmemTensor layout_for(int channels, int height, int width, const SpatialLayer* consumer) {
  SmemTensor t;
  t.channels = channels;
  t.height = height;
  t.width = width;
  int rows = height, cols = width;
  if (consumer && consumer->op == SpatialOp::Conv) {
    const SpatialLayer& c = *consumer;
    t.pad_top = c.pad_top;
    t.pad_left = c.pad_left;
    const bool pooled = c.pool != SpatialOp::Conv;
    const int oh = pooled ? c.conv_out_h : c.out.height, ow = pooled ? c.conv_out_w : c.out.width;
    const int needed_rows = (oh - 1) * c.stride_h + c.kernel_h;
    const int needed_cols = (ow - 1) * c.stride_w + c.kernel_w;
    // A tiled conv's last row strip reads up to c.rows - 1 rows past the output: slack.
    const int read_rows = is_tiled(c.variant) ? ((oh + c.rows - 1) / c.rows) * c.rows + c.kernel_h - 1 : needed_rows;
    rows = std::max(t.pad_top + height, read_rows);
    cols = std::max(t.pad_left + width, needed_cols);
    t.zero_fill = (t.pad_top > 0 || t.pad_left > 0 || needed_rows > t.pad_top + height ||
                   needed_cols > t.pad_left + width)
                      ? 1
                      : 0;
  }
  t.pitch = cols;
  t.channel = rows * cols;
  t.dense = (t.pad_top == 0 && t.pad_left == 0 && rows == height && cols == width) ? 1 : 0;
  t.image = round_up(int64_t(channels) * t.channel, 4);
  return t;
}

constexpr int64_t kMaxSmemDim = int64_t(1) << 24;  // keeps every int index in the kernels far from overflow

// The conv chain's layers, weights and buffers. `image`: the image chain's style (one image, 2 x 2
// work items, buffers from offset 0 after the weights; the caller adds the dense part and checks
// the total); otherwise the tiled kernel's (T images, as many as two blocks per SM allow).
void plan_spatial(const Graph& g, const std::vector<int>& chain, size_t end, const DeviceShape& dev, bool image,
                  ConvChainParams& p, std::vector<float>& w, std::vector<std::string>& summary) {
  std::vector<SpatialNode> producers;
  std::vector<Epilogue> epilogues(1);  // [0]: the input's; [i + 1]: producer i's
  for (size_t i = 0; i < end; ++i) {
    const PlannedNode& pn = g.nodes[size_t(chain[i])];
    const formats::Node& node = *pn.node;
    if (node.op == OpType::Conv2D || node.op == OpType::AvgPool || node.op == OpType::MaxPool) {
      producers.push_back(SpatialNode{&node, pn.inputs[0], pn.output});
      epilogues.emplace_back();
    } else if (auto a = act_of(node.op)) {
      push_act(epilogues.back(), *a, node);
    } else if (node.op != OpType::Flatten) {
      throw NotFused{fmt::format("node '{}' ({}) is not part of the fused conv chain", node.name,
                                 formats::op_name(node.op))};
    }
  }
  if (int(producers.size()) > kMaxSpatialLayers)
    throw NotFused{fmt::format("{} conv/pool layers, more than the fused kernel's {}", producers.size(),
                               kMaxSpatialLayers)};
  p.layer_count = int(producers.size());
  p.input_epilogue = epilogues[0];

  // Layers (without buffers yet), and the packed weights: per conv, [groups][C][kh][kw][ocb] then
  // the bias [oc_padded], each block 16-byte aligned.
  for (size_t i = 0; i < producers.size(); ++i) {
    const formats::Node& node = *producers[i].node;
    const Value& in = g.value(producers[i].in_value);
    const Value& out = g.value(producers[i].out_value);
    for (int64_t d : {in.shape.at(0), in.shape.at(1), in.shape.at(2), out.shape.at(0), out.shape.at(1), out.shape.at(2)})
      if (d > kMaxSmemDim) throw NotFused{fmt::format("node '{}': a dimension of {} is too large", node.name, d)};
    SpatialLayer& L = p.layers[i];
    L.epilogue = epilogues[i + 1];
    L.kernel_h = node.window.kernel_h;
    L.kernel_w = node.window.kernel_w;
    L.stride_h = node.window.stride_h;
    L.stride_w = node.window.stride_w;
    L.pad_top = node.window.pad_top;
    L.pad_left = node.window.pad_left;
    L.in.channels = int(in.shape[0]);
    L.in.height = int(in.shape[1]);
    L.in.width = int(in.shape[2]);
    L.out.channels = int(out.shape[0]);
    L.out.height = int(out.shape[1]);
    L.out.width = int(out.shape[2]);
    if (node.op == OpType::Conv2D) {
      L.op = SpatialOp::Conv;
      const bool tiled_shape = L.stride_h == 1 && L.kernel_h == L.kernel_w &&
                               (L.kernel_h == 2 || L.kernel_h == 3 || L.kernel_h == 5);
      L.ocb = choose_ocb(L.out.channels, tiled_shape, image);
      L.variant = conv_variant(tiled_shape, L.kernel_h, L.ocb, image);
      L.rows = image ? kImageRowsPerThread : choose_rows(L.out.height);
      L.oc_padded = round_up(L.out.channels, L.ocb);
      const int C = L.in.channels, KH = L.kernel_h, KW = L.kernel_w, OC = L.out.channels;
      const int64_t count = int64_t(L.oc_padded) * C * KH * KW;
      if (count > kMaxSmemDim) throw NotFused{fmt::format("node '{}': {} weights is too many", node.name, count)};
      L.weight_off = int(w.size());
      w.resize(w.size() + size_t(count), 0.0f);
      const std::vector<float>& src = node.weight->values;  // [OC][C][KH][KW]
      for (int oc = 0; oc < OC; ++oc)
        for (int c = 0; c < C; ++c)
          for (int ky = 0; ky < KH; ++ky)
            for (int kx = 0; kx < KW; ++kx) {
              const int grp = oc / L.ocb, o = oc % L.ocb;
              const size_t dst = size_t(L.weight_off) +
                                 ((((size_t(grp) * C + c) * KH + ky) * KW + kx) * L.ocb + o);
              w[dst] = src[((size_t(oc) * C + c) * KH + ky) * KW + kx];
            }
      w.resize(size_t(round_up(int64_t(w.size()), 4)), 0.0f);
      L.bias_off = int(w.size());
      w.resize(w.size() + size_t(L.oc_padded), 0.0f);
      if (node.bias)
        for (int oc = 0; oc < OC; ++oc) w[size_t(L.bias_off + oc)] = node.bias->values[size_t(oc)];
      w.resize(size_t(round_up(int64_t(w.size()), 4)), 0.0f);
      // The image chain's one-channel items (conv_tiled's OCU = 1, clusters at batch 1) read their
      // weights from a second copy, [oc_padded][C][kh * kw rounded up to 4]: one channel's taps as
      // float4 loads (a broadcast across the item's lanes) instead of one scalar load per tap, 2
      // floats apart. Same values, same sums.
      if (image && is_tiled(L.variant)) {
        const int taps = round_up(KH * KW, 4);
        L.split_weight_off = int(w.size());
        w.resize(w.size() + size_t(L.oc_padded) * size_t(C) * size_t(taps), 0.0f);
        for (int oc = 0; oc < OC; ++oc)
          for (int c = 0; c < C; ++c)
            for (int k = 0; k < KH * KW; ++k)
              w[size_t(L.split_weight_off) + (size_t(oc) * C + c) * size_t(taps) + size_t(k)] =
                  src[(size_t(oc) * C + c) * size_t(KH * KW) + size_t(k)];
      }
    } else {
      L.op = node.op == OpType::MaxPool ? SpatialOp::MaxPool : SpatialOp::AvgPool;
      L.count_include_pad = node.count_include_pad ? 1 : 0;
    }
  }
  p.weight_floats = int(w.size());

  // Fold a 2x2 stride-2 unpadded pool into the tiled conv before it (conv_chain.cu, version 2): the
  // conv's output width must be even so that lane pairs hold column pairs.
  std::vector<std::string> names;
  {
    int kept = 0;
    for (int i = 0; i < p.layer_count; ++i) {
      SpatialLayer L = p.layers[i];
      std::string name = producers[size_t(i)].node->name;
      if (L.op == SpatialOp::Conv && is_tiled(L.variant) && i + 1 < p.layer_count) {
        const SpatialLayer& P = p.layers[i + 1];
        const bool pool_2x2 = P.op != SpatialOp::Conv && P.kernel_h == 2 && P.kernel_w == 2 && P.stride_h == 2 &&
                              P.stride_w == 2 && P.pad_top == 0 && P.pad_left == 0 &&
                              P.out.height == L.out.height / 2 && P.out.width == L.out.width / 2;
        if (pool_2x2 && L.out.width % 2 == 0) {
          L.pool = P.op;
          L.pool_epilogue = P.epilogue;
          L.conv_out_h = L.out.height;
          L.conv_out_w = L.out.width;
          L.out.channels = P.out.channels;
          L.out.height = P.out.height;
          L.out.width = P.out.width;
          name += " + '" + producers[size_t(i) + 1].node->name + "'";
          ++i;
        }
      }
      p.layers[kept++] = L;
      names.push_back(name);
    }
    p.layer_count = kept;
  }

  // Buffers: tensor 0 is the input, tensor i + 1 layer i's output; even tensors share region A,
  // odd ones region B (a layer reads one region and writes the other).
  const Value& input = g.value(g.input);
  for (int64_t d : input.shape)
    if (d > kMaxSmemDim) throw NotFused{fmt::format("the input dimension {} is too large", d)};
  std::vector<SmemTensor> tensors;
  tensors.push_back(layout_for(int(input.shape.at(0)), int(input.shape.at(1)), int(input.shape.at(2)),
                               p.layer_count > 0 ? &p.layers[0] : nullptr));
  for (int i = 0; i < p.layer_count; ++i) {
    const SpatialLayer& L = p.layers[i];
    tensors.push_back(layout_for(L.out.channels, L.out.height, L.out.width,
                                 i + 1 < p.layer_count ? &p.layers[i + 1] : nullptr));
  }
  int64_t region[2] = {0, 0};
  for (size_t i = 0; i < tensors.size(); ++i) region[i % 2] = std::max<int64_t>(region[i % 2], tensors[i].image);
  const int64_t per_image = region[0] + region[1];
  const int64_t weights_bytes = int64_t(p.weight_floats) * 4;
  // Two blocks per SM when they fit (one block's barriers then overlap the other's work), else one.
  const int64_t limit = dev.shared_optin_bytes;
  int64_t T = image ? 1 : (limit / 2 - 1024 - weights_bytes) / (per_image * 4);
  if (T < 1) T = (limit - weights_bytes) / (per_image * 4);
  if (T < 1)
    throw NotFused{fmt::format("one image's activations ({} KiB) and the conv weights ({} KiB) exceed the {} KiB "
                               "of shared memory a block may use",
                               per_image * 4 / 1024, weights_bytes / 1024, limit / 1024)};
  T = std::min<int64_t>(T, 8);
  p.tile_images = int(T);
  const int base = p.weight_floats;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].off = base + (i % 2 == 0 ? 0 : int(region[0] * T));
  p.smem_floats = int(base + per_image * T);
  p.input = tensors[0];
  for (int i = 0; i < p.layer_count; ++i) {
    p.layers[i].in = tensors[size_t(i)];
    p.layers[i].out = tensors[size_t(i) + 1];
  }
  p.input_channels = int(input.shape[0]);
  p.input_height = int(input.shape[1]);
  p.input_width = int(input.shape[2]);
  const SmemTensor& last = tensors.back();
  p.output_elements = last.channels * last.height * last.width;

  if (image) return;  // plan_image states the image chain
  summary.push_back(fmt::format(
      "fused conv chain: 1 kernel, {} image(s) per block, {} threads, {:.1f} KiB shared memory per block ({:.1f} KiB "
      "conv weights staged once per block)",
      p.tile_images, kConvThreads, double(p.smem_floats) * 4 / 1024, double(weights_bytes) / 1024));
  if (p.input_epilogue.count) summary.push_back("  input" + epilogue_text(p.input_epilogue));
  for (int i = 0; i < p.layer_count; ++i) {
    const SpatialLayer& L = p.layers[i];
    const std::string& name = names[size_t(i)];
    if (L.op == SpatialOp::Conv)
      summary.push_back(fmt::format(
          "  '{}': conv2d {}x{}{}, {} -> {} channels, {} ({} output channels x {} rows per thread){}{}{}", name,
          L.kernel_h, L.kernel_w, L.stride_h == 1 && L.stride_w == 1 ? "" : " strided", L.in.channels, L.out.channels,
          is_tiled(L.variant) ? "register-tiled" : "generic", L.ocb, is_tiled(L.variant) ? L.rows : 1,
          epilogue_text(L.epilogue),
          L.pool == SpatialOp::Conv ? "" : (L.pool == SpatialOp::MaxPool ? " + maxpool 2x2 in registers" : " + avgpool 2x2 in registers"),
          epilogue_text(L.pool_epilogue)));
    else
      summary.push_back(fmt::format("  '{}': {} {}x{}{}", name, L.op == SpatialOp::MaxPool ? "maxpool" : "avgpool",
                                         L.kernel_h, L.kernel_w, epilogue_text(L.epilogue)));
  }
}

}  // namespace

namespace {

// A dense layer's chunks (DenseLayer::chunk_rows): about kDenseChunks of them, each a multiple of 4
// rows and at least 16 (shorter chains save less than the added sums cost); one chunk (the plain
// order) for layers of at most 16 rows. Every fused kernel sums in these chunks, so all agree bitwise.
constexpr int kDenseChunks = 8;
int chunk_rows_for(int in_padded) {
  const int rows = std::max(16, round_up((in_padded + kDenseChunks - 1) / kDenseChunks, 4));
  return std::min(rows, in_padded);
}

void plan_dense(const Graph& g, const std::vector<int>& chain, size_t begin, const DeviceShape& dev, FusedPlan& plan) {
  DenseChainParams& p = plan.dense;
  Epilogue* current = &p.input_epilogue;
  std::vector<const formats::Node*> layers;
  for (size_t i = begin; i < chain.size(); ++i) {
    const formats::Node& node = *g.nodes[size_t(chain[i])].node;
    if (node.op == OpType::Dense) {
      if (int(layers.size()) == kMaxDenseLayers)
        throw NotFused{fmt::format("more than {} dense layers", kMaxDenseLayers)};
      layers.push_back(&node);
      current = &p.layers[layers.size() - 1].epilogue;
    } else if (auto a = act_of(node.op)) {
      push_act(*current, *a, node);
    } else if (node.op == OpType::Softmax) {
      if (i + 1 != chain.size())
        throw NotFused{fmt::format("node '{}' (softmax) is not the last node", node.name)};
      if (layers.empty())
        throw NotFused{fmt::format("node '{}' (softmax) has no dense layer before it", node.name)};
      p.softmax = 1;
    } else if (node.op != OpType::Flatten) {
      throw NotFused{fmt::format("node '{}' ({}) is not part of the fused dense chain", node.name,
                                 formats::op_name(node.op))};
    }
  }
  p.layer_count = int(layers.size());
  p.input_features = int(g.value(plan.dense_input_value).elements);
  int64_t widest[2] = {0, 0};  // floats per image in region A (even tensors) and B (odd)
  int in_features = p.input_features;
  for (size_t l = 0; l < layers.size(); ++l) {
    const formats::Node& node = *layers[l];
    DenseLayer& L = p.layers[l];
    L.in = in_features;
    L.in_padded = round_up(in_features, 4);
    L.chunk_rows = chunk_rows_for(L.in_padded);
    L.units = node.units;
    L.units_padded = round_up(node.units, 4);
    L.in_pitch = L.in_padded;
    L.out_pitch = L.units_padded;
    widest[l % 2] = std::max<int64_t>(widest[l % 2], L.in_pitch);
    widest[(l + 1) % 2] = std::max<int64_t>(widest[(l + 1) % 2], L.out_pitch);
    DenseWeights dw;
    dw.weight_t.assign(size_t(L.in_padded) * size_t(L.units_padded), 0.0f);
    dw.bias.assign(size_t(L.units_padded), 0.0f);
    const std::vector<float>& src = node.weight->values;  // [units][in]
    for (int u = 0; u < L.units; ++u)
      for (int k = 0; k < L.in; ++k) dw.weight_t[size_t(k) * L.units_padded + u] = src[size_t(u) * L.in + k];
    if (node.bias)
      for (int u = 0; u < L.units; ++u) dw.bias[size_t(u)] = node.bias->values[size_t(u)];
    plan.dense_weights.push_back(std::move(dw));
    in_features = L.units;
  }
  // Version 2 (dense_chain.cu) stages each layer's weights through shared memory: slices of
  // slice_rows rows (a multiple of 4, at least 4, up to kDenseSliceFloats floats), two buffers;
  // version 1 (weights through L1/L2) where the slices do not fit beside the activations.
  bool staged = true;
  int64_t slice_floats = 0;
  for (int l = 0; l < p.layer_count; ++l) {
    DenseLayer& L = p.layers[l];
    L.slice_rows = std::min(L.in_padded, std::max(4, kDenseSliceFloats / L.units_padded / 4 * 4));
    slice_floats = std::max<int64_t>(slice_floats, int64_t(L.slice_rows) * L.units_padded);
  }
  // The largest tile of images whose buffers (and slices) stay within ~110 KiB (two blocks per SM),
  // else within the block limit.
  const int64_t per_image_bytes = (widest[0] + widest[1]) * 4;
  const auto choose_tm = [&](int64_t fixed_bytes) {
    for (int cand : {32, 16, 8, 4})
      if (cand * per_image_bytes + fixed_bytes <= 110 * 1024) return cand;
    return 4 * per_image_bytes + fixed_bytes <= dev.shared_optin_bytes ? 4 : 0;
  };
  int tm = staged ? choose_tm(2 * slice_floats * 4) : 0;
  if (tm == 0) {  // wide layers: slices too large for shared memory next to the activations
    staged = false;
    tm = choose_tm(0);
  }
  if (tm == 0)
    throw NotFused{fmt::format("4 images' dense activations ({} KiB) exceed the {} KiB of shared memory a block may use",
                               4 * per_image_bytes / 1024, dev.shared_optin_bytes / 1024)};
  p.tile_images = tm;
  p.staged_weights = staged ? 1 : 0;
  for (int l = 0; l < p.layer_count; ++l) {
    p.layers[l].in_off = l % 2 == 0 ? 0 : int(widest[0] * tm);
    p.layers[l].out_off = l % 2 == 0 ? int(widest[0] * tm) : 0;
  }
  const int64_t act_floats = (widest[0] + widest[1]) * tm;  // a multiple of 4: pitches are
  p.slice_off[0] = int(act_floats);
  p.slice_off[1] = int(act_floats + slice_floats);
  p.smem_floats = int(act_floats + (staged ? 2 * slice_floats : 0));
  plan.summary.push_back(fmt::format("fused dense chain: 1 kernel, {} images per block, {} threads, {:.1f} KiB shared "
                                     "memory per block (4 images x 4 units per thread; {})",
                                     tm, kDenseThreads, double(p.smem_floats) * 4 / 1024,
                                     staged ? "weights staged through shared memory in slices, cp.async"
                                            : "weights through L1/L2"));
  if (p.input_epilogue.count) plan.summary.push_back("  input" + epilogue_text(p.input_epilogue));
  for (int l = 0; l < p.layer_count; ++l) {
    const DenseLayer& L = p.layers[l];
    const int chunks = (L.in_padded + L.chunk_rows - 1) / L.chunk_rows;
    plan.summary.push_back(fmt::format("  '{}': dense {} -> {}{}{}", layers[size_t(l)]->name, L.in, L.units,
                                       epilogue_text(L.epilogue),
                                       chunks > 1 ? fmt::format(" (sums in {} chunks of {} rows, added in order)", chunks, L.chunk_rows)
                                                  : std::string()));
  }
  if (p.softmax) plan.summary.push_back("  softmax");
}

// The image chain (image_chain.cu) for small batches: the conv part in the image style, the dense
// layers of the tiled plan (same packed weights) with one image's buffers, two weight slices and
// the running sums after them. Throws NotFused with the reason when the model does not fit.
void plan_image(const Graph& g, const std::vector<int>& chain, size_t first_dense, const DeviceShape& dev,
                FusedPlan& plan) {
  ImageChainParams& p = plan.image;
  std::vector<std::string> unused;
  int64_t base = 0;
  if (plan.has_conv) {
    p.has_conv = 1;
    plan_spatial(g, chain, first_dense, dev, true, p.conv, plan.image_conv_weights, unused);
    base = p.conv.smem_floats;
  }
  if (plan.has_dense) {
    p.has_dense = 1;
    p.dense = plan.dense;
    DenseChainParams& d = p.dense;
    d.tile_images = 1;
    int64_t widest[2] = {0, 0};
    for (int l = 0; l < d.layer_count; ++l) {
      widest[l % 2] = std::max<int64_t>(widest[l % 2], d.layers[l].in_pitch);
      widest[(l + 1) % 2] = std::max<int64_t>(widest[(l + 1) % 2], d.layers[l].out_pitch);
    }
    base = round_up(base, 4);  // every dense row is read as float4s (image_chain.cu)
    for (int l = 0; l < 2; ++l) widest[l] = round_up(widest[l], 4);
    // The first dense layer reads the conv part's output where the last conv layer wrote it, when
    // that buffer already is the flattened row (CHW, no padding, no activation between, no zero
    // tail to add) and the even layers' inputs fit in the conv buffers from there: no copy and no
    // barrier between the two parts. Otherwise the kernel copies.
    int64_t region_a = base, region_b = base + widest[0];
    if (p.has_conv) {
      const SmemTensor& last = p.conv.layer_count > 0 ? p.conv.layers[p.conv.layer_count - 1].out : p.conv.input;
      const DenseLayer& first = d.layers[0];
      if (last.dense && last.off % 4 == 0 && d.input_epilogue.count == 0 && first.in_padded == p.conv.output_elements &&
          last.off + widest[0] <= p.conv.smem_floats) {
        p.flatten_in_place = 1;
        region_a = last.off;
        region_b = base;  // region A lives in the conv buffers
      }
    }
    for (int l = 0; l < d.layer_count; ++l) {
      DenseLayer& L = d.layers[l];
      // A staged slice holds at least 4 rows of k for every unit (image_chain.cu's DenseShare).
      L.slice_rows = std::min(L.in_padded, kImageSliceFloats / L.units_padded / 4 * 4);
      if (L.slice_rows < 4)
        throw NotFused{fmt::format("dense layer {} has {} units: a staged weight slice of {} floats holds 4 rows "
                                   "of at most {} units",
                                   l, L.units, kImageSliceFloats, kImageSliceFloats / 4)};
      L.in_off = int(l % 2 == 0 ? region_a : region_b);
      L.out_off = int(l % 2 == 0 ? region_b : region_a);
    }
    base = region_b + widest[1];
    p.slice_off[0] = int(base);
    p.slice_off[1] = int(base + kImageSliceFloats);
    p.acc_off = int(base + 2 * kImageSliceFloats);
    int64_t widest_units = 0;
    for (int l = 0; l < d.layer_count; ++l) widest_units = std::max<int64_t>(widest_units, d.layers[l].units_padded);
    p.acc_chunk_off = int(p.acc_off + widest_units);
    p.partial_off = int(p.acc_chunk_off + widest_units);
    p.tail_off = int(p.partial_off + kImageThreads);
    base = p.tail_off + kImageMaxCluster * 32;
    for (int l = 0; l < d.layer_count; ++l) {
      p.bias_off[l] = int(base);
      base += d.layers[l].units_padded;  // a multiple of 4: every bias starts 16-byte aligned
    }
  }
  if (base * 4 > dev.shared_optin_bytes)
    throw NotFused{fmt::format("one image's buffers and weights ({} KiB) exceed the {} KiB of shared memory a block "
                               "may use",
                               base * 4 / 1024, dev.shared_optin_bytes / 1024)};
  p.smem_floats = int(base);
  plan_image_conv_setup(p);
  plan.has_image = true;
}

}  // namespace

int image_tail_runs(const ImageChainParams& p, int size) {
  if (!p.has_dense || !p.dense.softmax ||
      p.dense.layer_count < 2 || size < 2)
    return 0;
  const DenseLayer& L = p.dense.layers[p.dense.layer_count - 1];
  const DenseLayer& P = p.dense.layers[p.dense.layer_count - 2];
  const int c = L.chunk_rows;
  if (L.units_padded > 32 || c > 32 || c % 4 != 0 || L.in_padded != P.units_padded) return 0;
  if (L.units_padded * c > kImageSliceFloats || L.units_padded * L.in_padded > kImageSliceFloats) return 0;
  const int runs = (L.in_padded + c - 1) / c;
  if (runs > size || runs > kImageMaxCluster) return 0;
  // DenseShare(P, 0, size, false, c).chunk_warps > 0: block 0's run of c units in one slice, and
  // 2 to 15 chunks of P's rows.
  const int cols = std::min(c, P.units_padded);
  int slice_rows = std::min(P.in_padded, kImageSliceFloats / cols / 4 * 4);
  if ((slice_rows / 4) % 2 == 0 && cols * (slice_rows + 4) > kImageSliceFloats) slice_rows -= 4;
  const int slices = (P.in_padded + slice_rows - 1) / slice_rows;
  const int chunks = (P.in_padded + P.chunk_rows - 1) / P.chunk_rows;
  return slices == 1 && chunks >= 2 && (chunks + 1) * 32 <= kImageThreads ? runs : 0;
}

std::string plan_image_cluster_kernel(ImageChainParams& p, bool force_general) {
  p.cluster_kernel = 0;
  if (force_general) return "the general cluster kernel (asked for: ImageChainOptions::general_cluster_kernel)";
  int k = 0;
  for (int l = 0; p.has_conv && l < p.conv.layer_count; ++l) {
    const SpatialLayer& L = p.conv.layers[l];
    if (L.out.zero_fill) return fmt::format("the general cluster kernel: conv layer {}'s output is read padded", l);
    if (L.op != SpatialOp::Conv) continue;
    const int lk = is_tiled(L.variant) ? L.kernel_h : 0;  // the image chain's tiled variants: K2_2, K3_2, K5_2
    if (lk == 0 || (k != 0 && lk != k))
      return "the general cluster kernel: the conv layers are not all tiled ones of one kernel size";
    k = lk;
  }
  p.cluster_kernel = k == 0 ? 1 : k;  // 1: no conv layer
  return k == 0 ? "the cluster kernel specialised for chains without conv layers"
                : fmt::format("the cluster kernel specialised for {}x{} convolutions", k, k);
}

void plan_image_conv_setup(ImageChainParams& p) {
  if (!p.has_conv) return;
  for (int l = 0; l < p.conv.layer_count; ++l) {
    SpatialLayer& L = p.conv.layers[l];
    if (L.op != SpatialOp::Conv || !is_tiled(L.variant)) continue;
    // conv_tiled's item counts (YB = kImageRowsPerThread rows, OCB = kImageOcb channels, or one).
    const int oh = L.pool != SpatialOp::Conv ? L.conv_out_h : L.out.height;
    const int ow = L.pool != SpatialOp::Conv ? L.conv_out_w : L.out.width;
    const int strips = (oh + kImageRowsPerThread - 1) / kImageRowsPerThread;
    const int groups = L.oc_padded / kImageOcb;
    L.inv_ow = 1.0f / float(ow);  // IEEE division: the same value as the device's __frcp_rn
    L.inv_strips = 1.0f / float(strips);
    L.inv_groups[0] = 1.0f / float(groups);
    L.inv_groups[1] = 1.0f / float(2 * groups);
    L.image_split = 0;
    for (int s = 0; s < 4; ++s) {
      const int size = 1 << s;
      // image_chain.cu's split rule: clusters of at least conv_split_blocks blocks, where a block's
      // one-channel items (whole warps) fit conv_split_items.
      const int split_items = 2 * groups * strips * ow;
      const int split_per_block = (split_items + 32 * size - 1) / (32 * size) * 32;
      const bool split = size > 1 && size >= p.conv_split_blocks && split_per_block <= p.conv_split_items;
      if (split) L.image_split |= 1 << s;
      // WorkRange(rounded, 32, rank, size): contiguous whole warps, `per` items each.
      const int items = (split ? 2 : 1) * groups * strips * ow;
      const int warps = (items + 31) / 32;
      L.image_per[s] = (warps + size - 1) / size * 32;
    }
  }
}

std::variant<FusedPlan, std::string> plan_fused(const Graph& g, const DeviceShape& dev) {
  try {
    if (g.outputs.size() != 1) throw NotFused{fmt::format("the graph has {} outputs, not one", g.outputs.size())};
    if (g.nodes.empty()) throw NotFused{"the graph has no nodes"};
    // The fused kernels have no per-channel affine step and no branch joins: such graphs run the
    // per-node kernels, and the reason names the first such node.
    for (const PlannedNode& pn : g.nodes) {
      const OpType op = pn.node->op;
      if (op == OpType::ScaleShift || op == OpType::Concat)
        throw NotFused{fmt::format("node '{}' ({}) has no fused kernel", pn.node->name, formats::op_name(op))};
    }
    // The chain: node i reads exactly the previous value, which nobody else reads.
    std::vector<int> chain;
    int previous = g.input;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const PlannedNode& pn = g.nodes[i];
      const formats::Node& node = *pn.node;
      if (pn.inputs.size() != 1 || pn.inputs[0] != previous)
        throw NotFused{fmt::format("node '{}' ({}) does not read only the previous node's output: not a chain",
                                   node.name, formats::op_name(node.op))};
      const Value& prev = g.value(previous);
      if (prev.consumers.size() != 1 || (prev.is_output && i > 0))
        throw NotFused{fmt::format("value '{}' has several readers or is an output: not a chain", prev.name)};
      if ((node.op == OpType::Conv2D || node.op == OpType::Dense) && !node.weight)
        throw NotFused{fmt::format("node '{}' has no weight tensor", node.name)};
      chain.push_back(int(i));
      previous = pn.output;
    }
    if (previous != g.outputs[0]) throw NotFused{"the last node's output is not the graph output"};

    // Split at the first dense layer (or at the softmax that would need one).
    size_t first_dense = chain.size();
    for (size_t i = 0; i < chain.size(); ++i) {
      const OpType op = g.nodes[size_t(chain[i])].node->op;
      if (op == OpType::Dense || op == OpType::Softmax) {
        first_dense = i;
        break;
      }
    }
    FusedPlan plan;
    bool spatial = false;
    for (size_t i = 0; i < first_dense; ++i) {
      const OpType op = g.nodes[size_t(chain[i])].node->op;
      spatial = spatial || op == OpType::Conv2D || op == OpType::AvgPool || op == OpType::MaxPool;
    }
    // Without a conv/pool the nodes before the first dense (flatten, activations) are the dense
    // chain's input epilogue.
    const size_t dense_begin = spatial ? first_dense : 0;
    if (spatial) {
      plan.has_conv = true;
      plan.conv_input_value = g.input;
      plan.conv_output_value = first_dense < chain.size() ? g.nodes[size_t(chain[first_dense])].inputs[0] : g.outputs[0];
      plan_spatial(g, chain, first_dense, dev, false, plan.conv, plan.conv_weights, plan.summary);
      FusionGroup group{{}, "fused conv chain"};
      for (size_t i = 0; i < first_dense; ++i) group.nodes.push_back(chain[i]);
      plan.groups.push_back(std::move(group));
    }
    if (dense_begin < chain.size()) {
      plan.has_dense = true;
      plan.dense_input_value = g.nodes[size_t(chain[dense_begin])].inputs[0];
      plan.dense_output_value = g.outputs[0];
      plan_dense(g, chain, dense_begin, dev, plan);
      if (plan.dense.layer_count == 0) throw NotFused{"the chain's flat part has no dense layer"};
      FusionGroup group{{}, "fused dense chain"};
      for (size_t i = dense_begin; i < chain.size(); ++i) group.nodes.push_back(chain[i]);
      plan.groups.push_back(std::move(group));
    }
    // A conv chain and a dense chain run as one group: the image chain writes an image's outputs
    // while other blocks still read their inputs, so the output must never share the input's arena
    // block, which two groups in a row would allow. The tiled kernels' hand-off between the two
    // chains then lives in the executable's own buffer, not in the arena.
    if (plan.has_conv && plan.has_dense) {
      FusionGroup whole{plan.groups[0].nodes, "fused chain (conv chain + dense chain)"};
      whole.nodes.insert(whole.nodes.end(), plan.groups[1].nodes.begin(), plan.groups[1].nodes.end());
      plan.groups = {std::move(whole)};
      plan.handoff_floats = g.value(plan.conv_output_value).elements;
    }
    try {
      plan_image(g, chain, first_dense, dev, plan);
    } catch (const NotFused& e) {
      plan.has_image = false;
      plan.image_why = e.why;
    }
    return plan;
  } catch (const NotFused& e) {
    return e.why;
  }
}

}  // namespace engine::custom::fused

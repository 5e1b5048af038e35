#include "engine/cpu/cpu_executable.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "engine/core/host_cpu.hpp"

namespace engine::cpu {
namespace {

struct Chw {
  int c, h, w;
};
Chw chw_of(const Shape& shape, const std::string& node) {
  if (shape.size() != 3)
    throw std::invalid_argument(fmt::format("cpu: node '{}' needs a [C, H, W] value, got {}", node,
                                            formats::shape_to_string(shape)));
  return Chw{int(shape[0]), int(shape[1]), int(shape[2])};
}

KAct act_of(OpType op) {
  switch (op) {
    case OpType::Relu: return KAct::Relu;
    case OpType::Tanh: return KAct::Tanh;
    case OpType::Sigmoid: return KAct::Sigmoid;
    default: return KAct::None;
  }
}

// A padded conv input larger than this (floats, all lanes) is not copied: its taps are
// bounds-checked instead (kernels.hpp, conv_generic). Only absurd padding gets there.
constexpr int64_t kMaxPaddedFloats = int64_t{1} << 22;

// Floats every buffer gets past its end: the single-image conv may load a vector that overhangs
// the last row by up to lanes - 1 floats (never stored).
constexpr int64_t kSlackFloats = 64;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Storage of every value the steps touch, laid out again by the steps' own liveness: a fused
// activation's output is written by the conv/dense step, while the conv/dense input is still being
// read, which the graph's node-by-node plan (Value::arena_offset) may have put in the same place.
// Greedy first fit in order of definition; returns the arena size in floats per sample.
struct Life {
  int64_t size = 0;
  int first = 0, last = 0;  // step indices, inclusive; the graph input is defined at step -1
  int64_t offset = -1;
};
int64_t place(std::vector<Life>& lives) {
  int64_t total = 0;
  for (size_t i = 0; i < lives.size(); ++i) {
    Life& v = lives[i];
    if (v.size == 0) continue;
    int64_t at = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (size_t j = 0; j < i; ++j) {
        const Life& u = lives[j];
        if (u.offset < 0 || u.last < v.first || v.last < u.first) continue;
        if (at < u.offset + u.size && u.offset < at + v.size) {
          at = round_up(u.offset + u.size, 16);
          moved = true;
        }
      }
    }
    v.offset = at;
    total = std::max(total, at + v.size);
  }
  return total;
}

}  // namespace

void CpuExecutable::FreeDeleter::operator()(float* p) const { std::free(p); }

bool CpuExecutable::fuse_add(KStep& s, int node, int& out_value, int& in1, std::vector<bool>& fused) const {
  if (!s.padded || s.act != KAct::None) return false;
  const Value& v = graph_.values[size_t(out_value)];
  if (v.is_output || v.consumers.size() != 1) return false;
  const int next = v.consumers[0];
  const PlannedNode& add = graph_.nodes[size_t(next)];
  if (fused[size_t(next)] || add.node->op != OpType::Add || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1])
    return false;
  // The other value must exist when the conv runs: the graph input or a node before it.
  const int other = add.inputs[0] == out_value ? add.inputs[1] : add.inputs[0];
  if (graph_.values[size_t(other)].producer >= node) return false;
  s.add_in1 = true;
  in1 = graph_.storage_root(other);
  out_value = add.output;
  fused[size_t(next)] = true;
  // And an activation that is the add's only reader.
  const Value& sum = graph_.values[size_t(out_value)];
  if (!sum.is_output && sum.consumers.size() == 1) {
    const PlannedNode& a = graph_.nodes[size_t(sum.consumers[0])];
    if (act_of(a.node->op) != KAct::None && a.inputs.size() == 1 && !fused[size_t(sum.consumers[0])]) {
      s.act = act_of(a.node->op);
      out_value = a.output;
      fused[size_t(sum.consumers[0])] = true;
    }
  }
  return true;
}

bool CpuExecutable::fuse_pool2(KStep& s, int& out_value, std::vector<bool>& fused) const {
  // The conv's value (after its fused activation) read only by the node that follows it.
  const Value& v = graph_.values[size_t(out_value)];
  if (v.is_output || v.consumers.size() != 1) return false;
  const int next = v.consumers[0];
  const PlannedNode& pool = graph_.nodes[size_t(next)];
  if (next <= 0 || fused[size_t(next)] || pool.node->op != OpType::MaxPool || pool.inputs.size() != 1) return false;
  const formats::Window2D& w = pool.node->window;
  if (w.kernel_h != 2 || w.kernel_w != 2 || w.stride_h != 2 || w.stride_w != 2 || w.pad_top != 0 ||
      w.pad_bottom != 0 || w.pad_left != 0 || w.pad_right != 0)
    return false;
  const Chw o = chw_of(graph_.values[size_t(pool.output)].shape, pool.node->name);
  if (o.c != s.c_out || o.h != s.h_out / 2 || o.w != s.w_out / 2 || o.h < 1 || o.w < 1) return false;
  s.pool2 = true;
  s.h_out = 2 * o.h;
  s.w_out = 2 * o.w;
  out_value = pool.output;
  fused[size_t(next)] = true;
  return true;
}

CpuExecutable::CpuExecutable(const Graph& graph, const CompileOptions& options, const KernelSet& kernels,
                             CpuOptions::Schedule schedule)
    : graph_(graph), kernels_(kernels), max_batch_(options.max_batch) {
  if (max_batch_ < 1) throw std::invalid_argument(fmt::format("cpu: max_batch must be at least 1, got {}", max_batch_));
  if (options.threads < 0 || options.threads > kMaxThreads)
    throw std::invalid_argument(fmt::format("cpu: threads must be 1 to {} (0: all cores), got {}", kMaxThreads,
                                            options.threads));
  const int lanes = kernels_.lanes;
  const auto& input = graph_.model->input;
  raw_sample_elements_ = formats::element_count(input.raw_shape);
  if (input.dtype == formats::InputDType::UInt8) {
    const Chw raw = chw_of(input.raw_shape, input.name);
    const formats::Preprocess& p = *input.preprocess;
    pre_ = Preprocess{raw.c, raw.h, raw.w, p.pad_top, p.pad_bottom, p.pad_left, p.pad_right, p.scale, p.pad_value,
                      p.mean.data(), p.std.data()};
  }

  // Steps. An activation right after a conv or dense that is its only reader is fused into it:
  // the kernel applies it before storing, and the conv/dense output is never written.
  std::vector<bool> fused(graph_.nodes.size(), false);
  struct Ids {
    int in0 = -1, in1 = -1, out = -1;
    int64_t out_shift = 0;  // floats per image from the output value's start (a concat input's slice)
  };
  std::vector<Ids> ids;
  auto root = [&](int id) { return graph_.storage_root(id); };
  int fused_count = 0, by_channel = 0, pools_fused = 0, adds_fused = 0;
  int64_t scratch_floats = 0;
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    const PlannedNode& planned = graph_.nodes[n];
    const formats::Node& node = *planned.node;
    if (node.op == OpType::Flatten || fused[n]) continue;
    KStep s;
    const Value& in = graph_.values[planned.inputs.at(0)];
    Ids id;
    id.in0 = root(planned.inputs[0]);
    if (planned.inputs.size() > 1) id.in1 = root(planned.inputs[1]);
    int out_value = planned.output;
    s.elements = in.elements;
    switch (node.op) {
      case OpType::Conv2D:
      case OpType::AvgPool:
      case OpType::MaxPool: {
        const Chw i = chw_of(in.shape, node.name), o = chw_of(graph_.values[planned.output].shape, node.name);
        s.op = node.op == OpType::Conv2D ? KOp::Conv : node.op == OpType::AvgPool ? KOp::AvgPool : KOp::MaxPool;
        s.c_in = i.c, s.h_in = i.h, s.w_in = i.w, s.c_out = o.c, s.h_out = o.h, s.w_out = o.w;
        const formats::Window2D& w = node.window;
        s.kh = w.kernel_h, s.kw = w.kernel_w, s.sh = w.stride_h, s.sw = w.stride_w, s.pt = w.pad_top, s.pl = w.pad_left;
        s.count_include_pad = node.count_include_pad;
        if (node.op == OpType::Conv2D) {
          if (!node.weight) throw std::invalid_argument(fmt::format("cpu: node '{}' has no weight", node.name));
          s.weight = node.weight->values.data();
          s.bias = node.bias ? node.bias->values.data() : nullptr;
          s.hp = int64_t(i.h) + w.pad_top + w.pad_bottom;
          s.wp = int64_t(i.w) + w.pad_left + w.pad_right;
          const bool unpadded = s.hp == i.h && s.wp == i.w;
          const int64_t padded = int64_t(i.c) * s.hp * s.wp;  // planner limits keep this in range
          s.padded = unpadded || padded * lanes <= kMaxPaddedFloats;
          if (s.padded && !unpadded) scratch_floats = std::max(scratch_floats, padded * lanes);
          // Single-image path: across channels unless rows fill more than twice as much of the
          // lanes (the channel kernel holds three times the accumulators: 2 x 12 against 4 x 2)
          // (LeNet c1: 28 of 32 along rows, 6 of 16 across channels; c3: 16 of 16 across
          // channels, 10 of 16 along rows).
          const double along_rows = double(o.w) / double(round_up(o.w, lanes));
          const double across_channels = double(o.c) / double(round_up(o.c, lanes));
          if (s.padded && 2 * across_channels >= along_rows) {
            s.single_by_channel = true;
            // Packed per block of 2 x lanes channels (the kernel's widest register block), so a
            // block's weights are one sequential stream: [block][tap][2 x lanes].
            const int64_t B = 2 * int64_t(lanes);
            s.c_out_padded = round_up(o.c, B);
            const int64_t taps = int64_t(i.c) * w.kernel_h * w.kernel_w;
            std::vector<float> t(size_t(taps * s.c_out_padded), 0.0f);
            for (int64_t oc = 0; oc < o.c; ++oc)
              for (int64_t k = 0; k < taps; ++k) t[size_t(((oc / B) * taps + k) * B + oc % B)] = s.weight[oc * taps + k];
            packed_.push_back(std::move(t));
            s.weight_t = packed_.back().data();
            std::vector<int32_t> offsets;
            for (int64_t c = 0; c < i.c; ++c)
              for (int64_t p = 0; p < w.kernel_h; ++p)
                for (int64_t q = 0; q < w.kernel_w; ++q) offsets.push_back(int32_t((c * s.hp + p) * s.wp + q));
            tap_offsets_.push_back(std::move(offsets));
            s.tap_offsets = tap_offsets_.back().data();
            ++by_channel;
          }
        }
        break;
      }
      case OpType::Dense: {
        if (!node.weight) throw std::invalid_argument(fmt::format("cpu: node '{}' has no weight", node.name));
        s.op = KOp::Dense;
        s.units = node.units;
        // Blocks and panels, both k-major (program.hpp).
        s.panel = 8 * lanes;  // the single-image kernel's 8 vectors (kernels.hpp, dense_single)
        const int64_t k = in.elements, padded = round_up(node.units, kUnitBlock), panel = s.panel;
        std::vector<float> w(size_t(padded * k), 0.0f), t(size_t(padded * k), 0.0f), b(size_t(padded), 0.0f);
        const float* src = node.weight->values.data();
        for (int64_t u = 0; u < node.units; ++u) {
          const int64_t blk = u / kUnitBlock, j = u % kUnitBlock;
          const int64_t first = u / panel * panel, width = std::min<int64_t>(panel, padded - first);
          for (int64_t i = 0; i < k; ++i) {
            w[size_t((blk * k + i) * kUnitBlock + j)] = src[u * k + i];
            t[size_t(first * k + i * width + (u - first))] = src[u * k + i];
          }
          if (node.bias) b[size_t(u)] = node.bias->values[size_t(u)];
        }
        packed_.push_back(std::move(w));
        s.weight = packed_.back().data();
        packed_.push_back(std::move(t));
        s.weight_t = packed_.back().data();
        packed_.push_back(std::move(b));
        s.bias = packed_.back().data();
        break;
      }
      case OpType::Relu:
      case OpType::Tanh:
      case OpType::Sigmoid:
        s.op = KOp::Act;
        s.act = act_of(node.op);
        break;
      case OpType::Softmax: s.op = KOp::Softmax; break;
      case OpType::Add: s.op = KOp::Add; break;
      case OpType::ScaleShift:
        if (!node.weight || !node.bias)
          throw std::invalid_argument(fmt::format("cpu: node '{}' (scale_shift) needs scale and shift", node.name));
        s.op = KOp::ScaleShift;
        s.c_in = int(in.shape.at(0));
        s.elements = in.elements / s.c_in;
        s.weight = node.weight->values.data();
        s.bias = node.bias->values.data();
        break;
      case OpType::Concat: {
        // One Copy step per input, each into its slice of the output (the slices follow the inputs'
        // order along the first dimension, which per image is contiguous).
        int64_t shift = 0;
        for (int input : planned.inputs) {
          KStep copy;
          copy.op = KOp::Copy;
          copy.elements = graph_.values[size_t(input)].elements;
          ids.push_back(Ids{root(input), -1, root(planned.output), shift});
          steps_.push_back(copy);
          shift += copy.elements;
        }
        continue;
      }
      case OpType::Flatten: break;
    }
    if (s.op == KOp::Conv || s.op == KOp::Dense) {
      const Value& v = graph_.values[planned.output];
      if (!v.is_output && v.consumers.size() == 1 && v.consumers[0] == int(n) + 1) {
        const PlannedNode& next = graph_.nodes[n + 1];
        if (act_of(next.node->op) != KAct::None && next.inputs.size() == 1 && next.inputs[0] == planned.output) {
          s.act = act_of(next.node->op);
          out_value = next.output;
          fused[n + 1] = true;
          ++fused_count;
        }
      }
    }
    if (s.op == KOp::Conv && s.single_by_channel && fuse_add(s, int(n), out_value, id.in1, fused)) {
      ++adds_fused;
    } else if (s.op == KOp::Conv && s.single_by_channel && fuse_pool2(s, out_value, fused)) {
      ++pools_fused;
      // The single-image path's row of window maxima goes after the padded input copy
      // (kernels.hpp, pool_row): 2 x lanes channels per pooled column.
      scratch_floats = std::max(scratch_floats, round_up(int64_t(s.c_in) * s.hp * s.wp, 16) + s.w_out / 2 * 2 * lanes);
    }
    id.out = root(out_value);
    ids.push_back(id);
    steps_.push_back(s);
  }
  // A conv whose value one padded conv reads (and otherwise only fused adds, KStep::add_in1)
  // writes it zero-bordered, as that conv reads it (KStep::out_wp), instead of the reader copying
  // it into the scratch: only where both kernels a step may run store through the bordered
  // layout (the tile kernel and the single-image channel kernel; not the rows kernel nor the
  // bounds-checked one).
  std::vector<int64_t> bordered_size(graph_.values.size(), 0);
  int bordered = 0;
  {
    std::vector<std::vector<int>> readers(graph_.values.size());
    for (int i = 0; i < int(steps_.size()); ++i)
      for (int in : {ids[size_t(i)].in0, ids[size_t(i)].in1})
        if (in >= 0 && (readers[size_t(in)].empty() || readers[size_t(in)].back() != i)) readers[size_t(in)].push_back(i);
    std::vector<bool> output(graph_.values.size(), false);
    for (int id : graph_.outputs) output[size_t(root(id))] = true;
    for (size_t i = 0; i < steps_.size(); ++i) {
      KStep& p = steps_[i];
      const int v = ids[i].out;
      if (p.op != KOp::Conv || !p.padded || !p.single_by_channel || ids[i].out_shift != 0 || output[size_t(v)]) continue;
      int conv = -1;
      bool ok = true;
      for (int j : readers[size_t(v)]) {
        const KStep& r = steps_[size_t(j)];
        const bool as_in0 = ids[size_t(j)].in0 == v, as_in1 = ids[size_t(j)].in1 == v;
        if (as_in1 && !(r.op == KOp::Conv && r.add_in1)) ok = false;
        if (!as_in0) continue;
        if (conv >= 0 || r.op != KOp::Conv || !r.padded || (r.hp == r.h_in && r.wp == r.w_in)) ok = false;
        conv = j;
      }
      if (!ok || conv < 0) continue;
      KStep& c = steps_[size_t(conv)];
      p.out_hp = c.hp, p.out_wp = c.wp, p.out_pt = c.pt, p.out_pl = c.pl;
      c.in_bordered = true;
      for (int j : readers[size_t(v)]) {
        KStep& r = steps_[size_t(j)];
        if (ids[size_t(j)].in1 == v) r.in1_hp = c.hp, r.in1_wp = c.wp, r.in1_pt = c.pt, r.in1_pl = c.pl;
      }
      bordered_size[size_t(v)] = int64_t(c.c_in) * c.hp * c.wp;
      ++bordered;
    }
  }
  // The steps' own arena layout (see place()).
  std::vector<Life> lives(graph_.values.size());
  const int end = int(steps_.size());
  const int input_root = root(graph_.input);
  lives[size_t(input_root)] = Life{graph_.values[size_t(input_root)].elements, -1, -1};
  // A value is live from the first step that writes it (a concat's output: its first Copy) to its
  // last reader.
  std::vector<bool> written(graph_.values.size(), false);
  for (int i = 0; i < end; ++i) {
    const int id = ids[size_t(i)].out;
    Life& out = lives[size_t(id)];
    out.size = bordered_size[size_t(id)] > 0 ? bordered_size[size_t(id)] : graph_.values[size_t(id)].elements;
    if (!written[size_t(id)]) out.first = i;
    written[size_t(id)] = true;
    out.last = i;
  }
  for (int i = 0; i < end; ++i)
    for (int in : {ids[size_t(i)].in0, ids[size_t(i)].in1})
      if (in >= 0) lives[size_t(in)].last = std::max(lives[size_t(in)].last, i);
  for (int id : graph_.outputs) lives[size_t(root(id))].last = end;
  arena_floats_ = place(lives);
  for (int i = 0; i < end; ++i) {
    KStep& s = steps_[size_t(i)];
    s.in0 = lives[size_t(ids[size_t(i)].in0)].offset;
    if (ids[size_t(i)].in1 >= 0) s.in1 = lives[size_t(ids[size_t(i)].in1)].offset;
    s.out = lives[size_t(ids[size_t(i)].out)].offset + ids[size_t(i)].out_shift;
  }
  input_offset_ = lives[size_t(input_root)].offset;
  program_ = Program{steps_.data(), int(steps_.size()), arena_floats_};
  for (int id : graph_.outputs) {
    output_offsets_.push_back(lives[size_t(root(id))].offset);
    output_elements_.push_back(graph_.values[id].elements);
  }

  // Images: one image at a time, its channels across the lanes, the dense layers for groups of
  // images, as many of their inputs as fit in half of L2, so each weight is read from memory once
  // per group. Auto picks it where a tile's largest zero-bordered conv input (the tile path's copy,
  // lanes images wide) exceeds L2: the tile kernel then streams its input from beyond L2 while one
  // image's stays in it. And where the single-image path runs every conv at its best, at least
  // two vectors of channels (2 x lanes) per block and vector stores, and the tile path copies a
  // padded input lanes images wide. On the zoo's models that split matched the measured winner at
  // batches 64 and 1,024 (docs/design/cpu-backend.md): images on cifar-vgg, vgg-mnist, resnet20
  // and (AVX-512) conv-bn-relu; tiles on keras-cnn ('valid' convs: no copy), concat-branches
  // (16- and 24-channel layers) and conv-bn-relu with AVX2 (stores through a buffer).
  const int64_t l2 = host_l2_cache_bytes();
  const bool tile_input_beyond_l2 = scratch_floats * int64_t(sizeof(float)) > l2;
  bool convs = false, all_wide = true, any_copy = false;
  for (const KStep& s : steps_) {
    if (s.op != KOp::Conv) continue;
    convs = true;
    all_wide = all_wide && s.single_by_channel && s.c_out >= 2 * lanes;
    any_copy = any_copy || (s.padded && (s.hp != s.h_in || s.wp != s.w_in));
  }
  const bool channels_win = kernels_.vector_planar_store && convs && all_wide && any_copy;
  images_ = schedule == CpuOptions::Schedule::Images ||
            (schedule == CpuOptions::Schedule::Auto && (tile_input_beyond_l2 || channels_win));
  int64_t dense_k = 0;
  for (const KStep& s : steps_)
    if (s.op == KOp::Dense) dense_k = std::max(dense_k, s.elements);
  if (images_ && dense_k > 0) {
    group_ = int(std::clamp<int64_t>(l2 / 2 / (dense_k * int64_t(sizeof(float))), 4, 64));
    // And no more images than whose arenas fit in half of L2: each image of a group runs its convs
    // in its own arena, so a larger group streams every activation from L3 or memory, on every
    // thread at once, while a smaller one only reads the dense weights more often, a small cost
    // next to a conv model's multiply-adds (docs/design/cpu-backend.md).
    const int64_t arena_bytes = round_up(arena_floats_ + kSlackFloats, 16) * int64_t(sizeof(float));
    group_ = int(std::clamp<int64_t>(l2 / 2 / arena_bytes, 1, group_));
  }

  // Per-thread buffers, one allocation, each part on its own cache lines.
  threads_ = options.threads > 0 ? options.threads : std::max(1, omp_get_max_threads());
  const int64_t per_sample = arena_floats_;
  const int64_t tile = images_ ? 0 : round_up(per_sample * lanes + kSlackFloats, 16);
  single_stride_ = round_up(per_sample + kSlackFloats, 16);
  const int64_t single = single_stride_ * group_;
  const int64_t scratch = round_up(scratch_floats + kSlackFloats, 16);
  const int64_t stage = images_ ? 0 : round_up(graph_.values[graph_.input].elements * lanes, 16);
  const int64_t per_thread = tile + single + scratch + stage;
  const double bytes = double(per_thread) * double(threads_) * sizeof(float);
  const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  // Linux overcommits: refuse, with a clear message, anything over half of the physical memory.
  if (memory > 0 && bytes > memory / 2)
    throw std::runtime_error(fmt::format(
        "cpu: {} threads need {:.1f} MiB of activation arenas and scratch, more than half of this machine's "
        "{:.1f} MiB of memory",
        threads_, bytes / (1 << 20), memory / (1 << 20)));
  const size_t total = size_t(per_thread) * size_t(threads_);
  buffers_.reset(static_cast<float*>(std::aligned_alloc(64, total * sizeof(float))));
  if (!buffers_) throw std::runtime_error(fmt::format("cpu: cannot allocate {:.1f} MiB of activation arenas", bytes / (1 << 20)));
  // NaN everywhere: an element no step writes shows up in the outputs instead of passing as 0.
  std::fill(buffers_.get(), buffers_.get() + total, std::numeric_limits<float>::quiet_NaN());
  for (int t = 0; t < threads_; ++t) {
    float* base = buffers_.get() + size_t(t) * size_t(per_thread);
    per_thread_.push_back(ThreadBuffers{base, base + tile, base + tile + single, base + tile + single + scratch});
  }
  pool_ = std::make_unique<TilePool>(threads_ - 1);
  // Below this many images a partial tile costs more than the single-image path: a tile takes
  // about as long as half its width in single images (the cpu backend's design, docs/design/).
  min_tile_images_ = std::max(2, lanes / 2);
  for (const KStep& s : steps_) {
    if (s.op == KOp::Conv) macs_per_image_ += int64_t(s.c_out) * s.h_out * s.w_out * s.c_in * s.kh * s.kw;
    if (s.op == KOp::Dense) macs_per_image_ += int64_t(s.units) * s.elements;
  }

  const std::string schedule_text =
      images_ ? fmt::format("one image at a time, dense layers for groups of up to {} images ({} KiB L2{})", group_,
                            l2 / 1024,
                            schedule != CpuOptions::Schedule::Auto ? ""
                            : tile_input_beyond_l2
                                ? fmt::format("; a tile's largest padded conv input, {} KiB, exceeds it",
                                              scratch_floats * int64_t(sizeof(float)) / 1024)
                                : "; every conv across two or more vectors of channels")
              : fmt::format("{} images per tile (+ single-image path for fewer than {})", lanes, min_tile_images_);
  summary_ = fmt::format(
      "cpu: {} kernels, {}, {} steps from {} nodes ({} activations, {} max pools and {} adds fused, {} convs across "
      "channels on single images, {} writing the next conv's zero-bordered input), {} threads with {:.1f} KiB of buffers each, batches up to {}, fp32, deterministic for any thread "
      "count and batch split{}",
      kernels_.name, schedule_text, steps_.size(), graph_.nodes.size(), fused_count, pools_fused, adds_fused, by_channel, bordered, threads_,
      double(per_thread) * sizeof(float) / 1024, max_batch_,
      options.precision == Precision::TF32 ? " (tf32 requested: the CPU has no TF32, fp32 used)" : "");
}

std::string CpuExecutable::execution_path() const {
  if (images_)
    return fmt::format("one image at a time, dense layers per group of up to {} images ({} kernels, activations fused)",
                       group_, kernels_.name);
  return fmt::format("whole network per tile of {} images ({} kernels, activations fused)", kernels_.lanes,
                     kernels_.name);
}

void CpuExecutable::load_input(const void* input, int s, float* x) const {
  const auto& in_spec = graph_.model->input;
  if (in_spec.dtype == formats::InputDType::UInt8) {
    // Vectorised, with the reference's operations: bitwise the same input values as every backend
    // (tests/cpu/fast_backend_test.cpp, PreprocessingIsBitwiseTheReferences).
    kernels_.preprocess(pre_, static_cast<const uint8_t*>(input) + int64_t(s) * raw_sample_elements_, x);
  } else {
    std::memcpy(x, static_cast<const float*>(input) + int64_t(s) * raw_sample_elements_,
                size_t(raw_sample_elements_) * sizeof(float));
  }
}

void CpuExecutable::run_one(const void* input, int s, std::span<float* const> outputs, const ThreadBuffers& b) const {
  load_input(input, s, b.single + input_offset_);
  kernels_.run_single(program_, b.single, b.scratch);
  for (size_t o = 0; o < outputs.size(); ++o)
    std::memcpy(outputs[o] + int64_t(s) * output_elements_[o], b.single + output_offsets_[o],
                size_t(output_elements_[o]) * sizeof(float));
}

void CpuExecutable::run_tile(const void* input, int first, int count, std::span<float* const> outputs,
                             const ThreadBuffers& b) const {
  const int64_t L = kernels_.lanes;
  const Value& in = graph_.values[graph_.input];
  float* x = b.tile + input_offset_ * L;
  // Each image to its own row of the staging buffer, then all of them to the lanes in register
  // transposes (a store per lane straight from each image touched a cache line per element).
  const int64_t E = in.elements;
  for (int i = 0; i < L; ++i) {
    // Lanes past the batch hold zeros: computed, never read back.
    float* row = b.stage + i * E;
    if (i < count)
      load_input(input, first + i, row);
    else
      std::fill(row, row + E, 0.0f);
  }
  kernels_.to_lanes(b.stage, E, x);
  kernels_.run_tile(program_, b.tile, b.scratch);
  for (size_t o = 0; o < outputs.size(); ++o) {
    const float* v = b.tile + output_offsets_[o] * L;
    const int64_t E = output_elements_[o];
    for (int i = 0; i < count; ++i) {
      float* dst = outputs[o] + (int64_t(first) + i) * E;
      for (int64_t e = 0; e < E; ++e) dst[e] = v[e * L + i];
    }
  }
}

void CpuExecutable::run_images(const void* input, int first, int count, std::span<float* const> outputs,
                               const ThreadBuffers& b) const {
  for (int i = 0; i < count; ++i) load_input(input, first + i, b.single + i * single_stride_ + input_offset_);
  kernels_.run_group(program_, b.single, single_stride_, count, b.scratch);
  for (int i = 0; i < count; ++i)
    for (size_t o = 0; o < outputs.size(); ++o)
      std::memcpy(outputs[o] + (int64_t(first) + i) * output_elements_[o],
                  b.single + i * single_stride_ + output_offsets_[o], size_t(output_elements_[o]) * sizeof(float));
}

int CpuExecutable::threads_for(int n) const {
  // --threads is a cap: a helper thread only for work that pays for waking it (a futex wake-up and
  // a cold cache cost microseconds; kMinMacsPerThread multiply-adds are 5-15 us of one core).
  const int64_t useful = std::max<int64_t>(1, macs_per_image_ * n / kMinMacsPerThread);
  return int(std::min<int64_t>({int64_t(threads_), int64_t(n), useful}));
}

bool CpuExecutable::singles_finish_first(int n, int tiles, int threads) const {
  // With fewer tiles than threads, tiles leave threads idle while single images would spread over
  // all of them. A single image costs at most kSingleImageCost images' share of a tile (measured:
  // 1.1x on Zen 4, up to 2x on a 16-core Xeon for LeNet-5), so in units of one image of a tile the
  // tiles take ceil(tiles / threads) * lanes and the singles ceil(n / threads) * kSingleImageCost.
  // Both paths give every image the same bits, so this per-call choice changes no result.
  constexpr int kSingleImageCost = 2;
  if (threads < 2 || tiles >= threads) return false;
  const int64_t tile_span = int64_t((tiles + threads - 1) / threads) * kernels_.lanes;
  const int64_t single_span = int64_t((n + threads - 1) / threads) * kSingleImageCost;
  return single_span < tile_span;
}

void CpuExecutable::run(const void* input, int n, std::span<float* const> outputs) {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("cpu: batch of {} samples outside 1..{}", n, max_batch_));
  if (outputs.size() != graph_.outputs.size())
    throw std::invalid_argument(fmt::format("cpu: expected {} output buffers, got {}", graph_.outputs.size(),
                                            outputs.size()));
  if (!input) throw std::invalid_argument("cpu: no input");
  if (images_) {
    // Groups as large as the buffers allow, but with several threads about four groups per thread
    // where the batch has them, at least kMinGroup images each: a thread that starts late or runs
    // slower then leaves its share to the others instead of finishing alone (every group gives
    // the same bits: kernels.hpp, run_group).
    constexpr int kGroupsPerThread = 4, kMinGroup = 4;
    const int threads = threads_for(n);
    const int share = threads > 1 ? std::max(kMinGroup, (n + kGroupsPerThread * threads - 1) / (kGroupsPerThread * threads))
                                  : n;
    const int group = std::min({group_, (n + threads - 1) / threads, share});
    struct Job {
      const CpuExecutable* self;
      const void* input;
      int n, group;
      std::span<float* const> outputs;
    } job{this, input, n, group, outputs};
    const int items = (n + group - 1) / group;
    pool_->run(items, std::min(threads, items), [](void* context, int item, int thread) {
      const Job& j = *static_cast<const Job*>(context);
      const int first = item * j.group;
      j.self->run_images(j.input, first, std::min(j.group, j.n - first), j.outputs, j.self->per_thread_[size_t(thread)]);
    }, &job);
    return;
  }

  const int lanes = kernels_.lanes;
  const int rest = n % lanes;
  const int threads = threads_for(n);
  int tiles = n / lanes + (rest >= min_tile_images_ ? 1 : 0);
  int singles = rest >= min_tile_images_ ? 0 : rest;
  if (singles_finish_first(n, tiles, threads)) tiles = 0, singles = n;
  const int items = tiles + singles;
  struct Job {
    const CpuExecutable* self;
    const void* input;
    int n, tiles, lanes;
    std::span<float* const> outputs;
  } job{this, input, n, tiles, lanes, outputs};
  // Whole tiles/images handed out one at a time (tile_pool.hpp); each is computed by one thread,
  // start to end, so which thread takes which changes nothing in the results.
  pool_->run(items, std::min(threads, items), [](void* context, int item, int thread) {
    const Job& j = *static_cast<const Job*>(context);
    const ThreadBuffers& b = j.self->per_thread_[size_t(thread)];
    if (item < j.tiles) {
      const int first = item * j.lanes;
      j.self->run_tile(j.input, first, std::min(j.lanes, j.n - first), j.outputs, b);
    } else {
      j.self->run_one(j.input, j.tiles * j.lanes + (item - j.tiles), j.outputs, b);
    }
  }, &job);
}

void CpuExecutable::stage_input(const void* input, int n) {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("cpu: batch of {} samples outside 1..{}", n, max_batch_));
  if (!input) throw std::invalid_argument("cpu: no input");
  if (staged_outputs_.empty()) {
    for (size_t i = 0; i < graph_.outputs.size(); ++i)
      staged_outputs_.emplace_back(size_t(graph_.output_elements(i)) * size_t(max_batch_));
    for (auto& v : staged_outputs_) staged_pointers_.push_back(v.data());
  }
  staged_input_ = input;
}

void CpuExecutable::compute(int n) {
  if (!staged_input_) throw std::logic_error("cpu: compute() before stage_input()");
  run(staged_input_, n, staged_pointers_);
}

const float* CpuExecutable::staged_output(size_t i) const {
  if (i >= staged_outputs_.size()) throw std::out_of_range("cpu: staged_output() before stage_input(), or no such output");
  return staged_outputs_[i].data();
}

}  // namespace engine::cpu

#include "engine/cpu/int8/int8_executable.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "engine/core/host_cpu.hpp"
#include "engine/cpu/int8/int8_ops.hpp"

namespace engine::cpu::int8 {
namespace {

// Output pixels of a convolution whose im2col rows are built, multiplied and requantized at once:
// a multiple of every micro-tile's row count, small enough for rows of up to 1,152 bytes and their
// int32 sums to stay in L2.
constexpr int kPixelTile = 96;

// Images computed together (dense layers multiply them as one matrix): as many as keep a chunk's
// activations within the core's L2 (at least 1, at most 32).
int images_per_chunk(int64_t arena_floats, int max_batch) {
  const int64_t l2 = host_l2_cache_bytes();
  const int64_t fit = int64_t(l2) / std::max<int64_t>(1, arena_floats * int64_t(sizeof(float)));
  return int(std::clamp<int64_t>(fit, 1, std::min(32, max_batch)));
}

Hwc hwc_of(const Shape& s) { return s.size() == 3 ? Hwc{int(s[1]), int(s[2]), int(s[0])} : Hwc{}; }

void to_nchw(const float* x, Hwc d, float* y) {
  const int64_t hw = int64_t(d.height) * d.width;
  for (int c = 0; c < d.channels; ++c)
    for (int64_t pix = 0; pix < hw; ++pix) y[c * hw + pix] = x[pix * d.channels + c];
}

struct Step {
  OpType op{};
  std::vector<int> inputs;  // storage roots
  // Per input: the [C, H, W] layout of a flattened value that this (non-dense) op reads in the
  // model's order, so it is made NCHW first; channels 0 where the input is read as stored.
  std::vector<Hwc> unflatten;
  int output = -1;          // storage root
  int64_t in_elements = 0, out_elements = 0;
  Hwc in, out;
  const formats::Window2D* win = nullptr;
  bool count_include_pad = false;
  // conv2d, dense
  float in_scale = 0;
  int n = 0, kp = 0, ldc = 0;
  Act act = Act::None;  // the next node's, run in the epilogue
  std::vector<uint8_t> packed;
  std::vector<int32_t> offset;  // 128 * sum of the quantized weights per output channel
  std::vector<double> scale, bias;
  // A one-channel stride-1 convolution through the set's plane_conv (int8_gemm.hpp), with the
  // 2x2 pool that reads its output where there is one; `out` is then the pool's output.
  bool plane = false;
  Pool pool = Pool::None;
  Hwc conv_out;
  std::vector<int32_t> taps, tap_offsets;  // PlaneConv's
  std::vector<PlaneGroup> groups;
  // scale_shift
  const float* ss_scale = nullptr;
  const float* ss_shift = nullptr;
  // concat: channels (or elements, for vectors) of each input
  std::vector<int64_t> parts;
};

// Weights of `rows` outputs quantized per row (the reference's quantize_per_channel): int8 values
// and each row's scale.
void quantize_weights(const float* w, int rows, int64_t per_row, std::vector<int8_t>& q, std::vector<float>& s) {
  q.assign(size_t(rows) * size_t(per_row), 0);
  s.assign(size_t(rows), 0.0f);
  for (int r = 0; r < rows; ++r) {
    float hi = 0;
    for (int64_t i = 0; i < per_row; ++i) hi = std::fmax(hi, std::fabs(w[r * per_row + i]));
    s[size_t(r)] = hi / 127.0f;
    if (s[size_t(r)] == 0.0f) continue;
    for (int64_t i = 0; i < per_row; ++i) {
      const float v = std::nearbyint(w[r * per_row + i] / s[size_t(r)]);
      q[size_t(r * per_row + i)] = int8_t(std::fmax(-127.0f, std::fmin(127.0f, v)));
    }
  }
}

class Int8Executable : public Executable, public StagedExecution {
 public:
  Int8Executable(const Graph& planned, const CompileOptions& options, const Int8Gemm& gemm, PreprocessFn preprocess);
  int max_batch() const override { return max_batch_; }
  void run(const void* input, int n, std::span<float* const> outputs) override;
  std::string plan_summary() const override { return summary_; }
  std::string execution_path() const override { return fmt::format("int8 products ({})", gemm_.name); }
  // Staged execution (engine bench): synchronous on the host, outputs into buffers of max_batch.
  StagedExecution* staged_execution() override { return this; }
  void stage_input(const void* input, int /*n*/) override { staged_input_ = input; }  // run() checks n
  void compute(int n) override { run(staged_input_, n, staged_pointers_); }
  void fetch_outputs(int /*n*/) override {}
  const float* staged_output(size_t i) const override { return staged_outputs_.at(i).data(); }

 private:
  struct Buffers {
    std::vector<float> arena;     // images_ * arena floats
    std::vector<float> nchw;      // one input image before it is made NHWC
    std::vector<uint8_t> padded;  // a convolution's quantized padded input, or a dense layer's rows
    std::vector<uint8_t> cols;    // im2col rows
    std::vector<int32_t> sums;
    std::vector<double> pool;
    std::vector<float> planes;    // PlaneConv::scratch
    std::vector<float> flat;      // flattened inputs in the model's order (Step::unflatten)
    std::vector<const float*> inputs;  // the current step's inputs
  };
  void run_chunk(const void* input, int first, int count, std::span<float* const> outputs, Buffers& b) const;
  void conv(const Step& s, const float* x, float* y, Buffers& b) const;
  // A chunk's images through a PlaneConv step: every image quantized first, as the pool's output
  // may take the storage of the convolution's input (the two are never live at once in the plan).
  void plane_conv(const Step& s, const float* x, float* y, int count, Buffers& b) const;
  float* at(float* arena, int value) const { return arena + graph_.values[size_t(value)].arena_offset * images_; }

  Graph graph_;
  const Int8Gemm& gemm_;
  PreprocessFn preprocess_ = nullptr;
  Preprocess pre_;  // uint8 input only
  int max_batch_ = 0, threads_ = 1, images_ = 1;
  int64_t flat_floats_ = 0;         // per image: the most that one step's flattened inputs hold
  size_t plane_padded_bytes_ = 0;  // per image: the largest PlaneConv step's quantized input
  std::vector<Step> steps_;
  int64_t raw_sample_elements_ = 0;
  std::vector<Buffers> buffers_;
  std::string summary_;
  const void* staged_input_ = nullptr;
  std::vector<std::vector<float>> staged_outputs_;
  std::vector<float*> staged_pointers_;
};

// A conv2d or dense whose output only a relu or tanh reads runs with it in its epilogue.
Graph fuse_activations(const Graph& graph) {
  std::vector<FusionGroup> groups;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const PlannedNode& p = graph.nodes[i];
    if (p.node->op != OpType::Conv2D && p.node->op != OpType::Dense) continue;
    const Value& v = graph.values[size_t(p.output)];
    if (v.is_output || v.consumers.size() != 1) continue;
    const int next = v.consumers[0];
    const OpType act = graph.nodes[size_t(next)].node->op;
    if (act != OpType::Relu && act != OpType::Tanh) continue;
    groups.push_back(FusionGroup{{int(i), next}, fmt::format("{}+{}", formats::op_name(p.node->op), formats::op_name(act))});
  }
  return groups.empty() ? graph : fuse_groups(graph, std::move(groups));
}

// PlaneConv::groups for an output of out_h x out_w pixels from a padded image of rows of wp bytes:
// empty where some group's lanes do not fit its gather (more than 7 taps a row, or a group's rows
// too far apart in the image).
std::vector<PlaneGroup> plane_groups(int out_h, int out_w, int wp) {
  const int pixels = out_h * out_w;
  auto origin = [&](int f) {
    f = std::min(f, pixels - 1);  // the last group's lanes past the end repeat the last pixel
    return (f / out_w) * wp + f % out_w;
  };
  std::vector<PlaneGroup> groups(size_t((pixels + 15) / 16));
  for (size_t g = 0; g < groups.size(); ++g) {
    PlaneGroup& pg = groups[g];
    const int f0 = int(g) * 16;
    pg.origin = origin(f0);
    for (int lane = 0; lane < 4; ++lane) {  // 128-bit lanes: four pixels each
      const int first = origin(f0 + 4 * lane) - pg.origin, dword = first / 4;
      if (dword + 3 > 15) return {};
      for (int t = 0; t < 4; ++t) pg.dwords[4 * lane + t] = dword + t;
      for (int m = 0; m < 4; ++m) {
        const int at = origin(f0 + 4 * lane + m) - pg.origin - 4 * dword;
        if (at + 3 > 15) return {};
        for (int t = 0; t < 4; ++t) pg.bytes[16 * lane + 4 * m + t] = uint8_t(at + t);
      }
    }
  }
  return groups;
}

// The 2x2 pool (stride 2, no padding) that node `next` is, reading only `value`, which nothing
// else reads; Pool::None otherwise.
Pool pool_reading(const Graph& graph, size_t next, int value) {
  if (next >= graph.nodes.size()) return Pool::None;
  const PlannedNode& p = graph.nodes[next];
  const Value& v = graph.values[size_t(value)];
  const formats::Window2D& w = p.node->window;
  const OpType op = p.node->op;
  if ((op != OpType::MaxPool && op != OpType::AvgPool) || v.is_output || v.consumers.size() != 1 ||
      p.inputs.size() != 1 || p.inputs[0] != value)
    return Pool::None;
  if (w.kernel_h != 2 || w.kernel_w != 2 || w.stride_h != 2 || w.stride_w != 2 || w.pad_top || w.pad_bottom ||
      w.pad_left || w.pad_right)
    return Pool::None;
  return op == OpType::MaxPool ? Pool::Max : Pool::Avg;
}

Int8Executable::Int8Executable(const Graph& planned, const CompileOptions& options, const Int8Gemm& gemm,
                               PreprocessFn preprocess)
    : graph_(fuse_activations(planned)), gemm_(gemm), preprocess_(preprocess), max_batch_(options.max_batch) {
  if (max_batch_ < 1) throw std::invalid_argument(fmt::format("cpu: max_batch must be at least 1, got {}", max_batch_));
  if (options.threads < 0 || options.threads > kMaxThreads)
    throw std::invalid_argument(
        fmt::format("cpu: threads must be 1 to {} (0: all cores), got {}", kMaxThreads, options.threads));
  const formats::Model& model = *graph_.model;
  if (!model.calibration)
    throw std::invalid_argument(fmt::format("model '{}' has no calibration data, which int8 needs: run engine calibrate "
                                            "MODEL DATA -o OUT.json first",
                                            model.name));
  auto range_of = [&](int value) -> std::optional<double> {
    for (int v = value; v >= 0; v = graph_.values[size_t(v)].alias_of)
      for (const auto& [name, r] : model.calibration->ranges)
        if (name == graph_.values[size_t(v)].name) return r;
    return std::nullopt;
  };
  raw_sample_elements_ = formats::element_count(model.input.raw_shape);
  if (model.input.dtype == formats::InputDType::UInt8) {
    const Shape& raw = model.input.raw_shape;
    const formats::Preprocess& p = *model.input.preprocess;
    pre_ = Preprocess{int(raw[0]), int(raw[1]), int(raw[2]), p.pad_top, p.pad_bottom, p.pad_left, p.pad_right,
                      p.scale, p.pad_value, p.mean.data(), p.std.data()};
  }
  size_t padded_bytes = 0, cols_bytes = 0, sums_ints = 0, pool_doubles = 0, plane_floats = 0;
  int fused = 0, planes = 0;
  std::vector<bool> absorbed(graph_.nodes.size(), false);  // pools run in their convolution's step
  size_t max_inputs = 1;
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const int group = graph_.group_of.empty() ? -1 : graph_.group_of[i];
    if (group >= 0 && graph_.groups[size_t(group)].nodes.front() != int(i)) continue;  // runs in its group's step
    if (absorbed[i]) continue;
    const PlannedNode& p = graph_.nodes[i];
    const formats::Node& node = *p.node;
    if (node.op == OpType::Flatten) continue;  // an alias
    Step s;
    s.op = node.op;
    int64_t flat_floats = 0;
    for (int v : p.inputs) {
      s.inputs.push_back(graph_.storage_root(v));
      const Shape& root_shape = graph_.values[size_t(s.inputs.back())].shape;
      const bool flattened = graph_.values[size_t(v)].shape.size() != 3 && root_shape.size() == 3;
      s.unflatten.push_back(flattened && node.op != OpType::Dense ? hwc_of(root_shape) : Hwc{1, 1, 0});
      if (s.unflatten.back().channels > 0) flat_floats += graph_.values[size_t(v)].elements;
    }
    flat_floats_ = std::max(flat_floats_, flat_floats);
    max_inputs = std::max(max_inputs, p.inputs.size());
    int out_value = group >= 0 ? graph_.nodes[size_t(graph_.groups[size_t(group)].nodes.back())].output : p.output;
    if (group >= 0) {
      const OpType act = graph_.nodes[size_t(graph_.groups[size_t(group)].nodes.back())].node->op;
      s.act = act == OpType::Relu ? Act::Relu : Act::Tanh;
      ++fused;
    }
    const Value& in = graph_.values[size_t(p.inputs[0])];
    s.in = hwc_of(graph_.values[size_t(s.inputs[0])].shape);
    const formats::Window2D& win = node.window;
    s.plane = node.op == OpType::Conv2D && gemm_.plane_conv && s.in.channels == 1 && win.stride_h == 1 &&
              win.stride_w == 1;
    s.conv_out = hwc_of(graph_.values[size_t(out_value)].shape);
    // Its output planes are whole images (the pool needs rows in pairs): only where they fit in L2.
    s.plane = s.plane && int64_t(s.conv_out.channels) * s.conv_out.height * s.conv_out.width * int64_t(sizeof(float)) <=
                             host_l2_cache_bytes();
    if (s.plane) {
      s.groups = plane_groups(s.conv_out.height, s.conv_out.width, win.pad_left + s.in.width + win.pad_right);
      s.plane = !s.groups.empty();
    }
    if (s.plane) {
      const size_t last = group >= 0 ? size_t(graph_.groups[size_t(group)].nodes.back()) : i;
      s.pool = pool_reading(graph_, last + 1, out_value);
      if (s.pool != Pool::None) {
        absorbed[last + 1] = true;
        out_value = graph_.nodes[last + 1].output;
      }
      ++planes;
    }
    s.output = graph_.storage_root(out_value);
    const Value& out = graph_.values[size_t(out_value)];
    s.in_elements = in.elements;
    s.out_elements = out.elements;
    s.out = hwc_of(out.shape);
    s.win = &node.window;
    s.count_include_pad = node.count_include_pad;
    if (node.op == OpType::Conv2D || node.op == OpType::Dense) {
      const auto r = range_of(p.inputs[0]);
      if (!r)
        throw std::invalid_argument(fmt::format("model '{}': its calibration has no range for '{}', the input of a {} "
                                                "node: calibrate the model again (engine calibrate)",
                                                model.name, in.name, formats::op_name(node.op)));
      if (!node.weight) throw std::invalid_argument(fmt::format("cpu: node '{}' has no weight", node.name));
      s.in_scale = float(*r) / 127.0f;
      const bool is_conv = node.op == OpType::Conv2D;
      s.n = is_conv ? s.out.channels : node.units;
      const int64_t k = is_conv ? int64_t(s.in.channels) * node.window.kernel_h * node.window.kernel_w : in.elements;
      s.kp = round_up(int(k), kKStep);
      s.ldc = round_up(s.n, kColumnStep);
      std::vector<int8_t> q;
      std::vector<float> ws;
      quantize_weights(node.weight->values.data(), s.n, k, q, ws);
      // Reorder each row's k to the order the activations are read in: (p, q, c) for a convolution
      // (OIHW in the model), and NHWC for a dense layer reading a flattened [C, H, W] value.
      const Shape& src = graph_.values[size_t(s.inputs[0])].shape;
      std::vector<int8_t> rows(size_t(s.n) * size_t(s.kp), 0);
      for (int o = 0; o < s.n; ++o) {
        const int8_t* from = q.data() + size_t(o) * size_t(k);
        int8_t* to = rows.data() + size_t(o) * size_t(s.kp);
        if (is_conv) {
          const int kh = node.window.kernel_h, kw = node.window.kernel_w, c = s.in.channels;
          for (int ch = 0; ch < c; ++ch)
            for (int a = 0; a < kh; ++a)
              for (int b = 0; b < kw; ++b) to[(a * kw + b) * c + ch] = from[(ch * kh + a) * kw + b];
        } else if (src.size() == 3) {
          const int64_t c = src[0], hw = src[1] * src[2];
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t x = 0; x < hw; ++x) to[x * c + ch] = from[ch * hw + x];
        } else {
          std::copy(from, from + k, to);
        }
      }
      s.packed.resize(gemm_.packed_bytes(s.n, s.kp));
      gemm_.pack(rows.data(), s.n, s.kp, s.packed.data());
      s.offset.resize(size_t(s.n));
      s.scale.resize(size_t(s.n));
      s.bias.resize(size_t(s.n));
      for (int o = 0; o < s.n; ++o) {
        int32_t sum = 0;
        for (int64_t x = 0; x < k; ++x) sum += q[size_t(o) * size_t(k) + size_t(x)];
        s.offset[size_t(o)] = 128 * sum;
        s.scale[size_t(o)] = double(s.in_scale) * double(ws[size_t(o)]);
        s.bias[size_t(o)] = node.bias ? double(node.bias->values[size_t(o)]) : 0.0;
      }
      if (s.plane) {  // PlaneConv::taps and tap_offsets, from the (p, q) rows
        const int kh = win.kernel_h, kw = win.kernel_w, groups = (kw + 3) / 4, t = kh * groups;
        const int wp = win.pad_left + s.in.width + win.pad_right;
        s.taps.assign(size_t(round_up(s.n, 16)) * size_t(t), 0);
        for (int o = 0; o < s.n; ++o)
          for (int a = 0; a < kh; ++a)
            for (int b = 0; b < kw; ++b) {
              const uint32_t byte = uint8_t(rows[size_t(o) * s.kp + size_t(a * kw + b)]);
              const size_t at = (size_t(o / 16) * t + size_t(a * groups + b / 4)) * 16 + size_t(o % 16);
              reinterpret_cast<uint32_t&>(s.taps[at]) |= byte << (8 * (b % 4));
            }
        for (int a = 0; a < kh; ++a)
          for (int g = 0; g < groups; ++g) s.tap_offsets.push_back(a * wp + 4 * g);
        plane_floats =
            std::max(plane_floats, size_t(plane_conv_scratch(s.n, s.conv_out.height, s.conv_out.width)));
      }
      if (is_conv) {
        const auto& w = node.window;
        if (s.plane)
          plane_padded_bytes_ = std::max(plane_padded_bytes_, size_t(w.pad_top + s.in.height + w.pad_bottom) *
                                                                  size_t(w.pad_left + s.in.width + w.pad_right));
        padded_bytes = std::max(padded_bytes, size_t(w.pad_top + s.in.height + w.pad_bottom) *
                                                  size_t(w.pad_left + s.in.width + w.pad_right) * size_t(s.in.channels));
        cols_bytes = std::max(cols_bytes, size_t(kPixelTile) * size_t(s.kp));
        sums_ints = std::max(sums_ints, size_t(kPixelTile) * size_t(s.ldc));
      } else {
        padded_bytes = std::max(padded_bytes, size_t(32) * size_t(s.kp));
        sums_ints = std::max(sums_ints, size_t(32) * size_t(s.ldc));
      }
    } else if (node.op == OpType::ScaleShift) {
      s.ss_scale = node.weight->values.data();
      s.ss_shift = node.bias->values.data();
      s.out.channels = int(in.shape.at(0));
    } else if (node.op == OpType::Concat) {
      for (int v : s.inputs) {
        const Shape& sh = graph_.values[size_t(v)].shape;
        s.parts.push_back(sh.size() == 3 ? sh[0] : graph_.values[size_t(v)].elements);
      }
    } else if (node.op == OpType::AvgPool) {
      pool_doubles = std::max(pool_doubles, size_t(s.in.channels));
    }
    steps_.push_back(std::move(s));
  }

  threads_ = options.threads > 0 ? options.threads : std::max(1, omp_get_max_threads());
  images_ = images_per_chunk(graph_.arena_floats_per_sample, max_batch_);
  const int workers = std::min(threads_, (max_batch_ + images_ - 1) / images_);
  buffers_.resize(size_t(workers));
  for (Buffers& b : buffers_) {
    b.arena.assign(size_t(graph_.arena_floats_per_sample) * size_t(images_), 0.0f);
    b.nchw.assign(size_t(graph_.values[size_t(graph_.input)].elements), 0.0f);
    b.padded.assign(std::max(padded_bytes, plane_padded_bytes_ * size_t(images_)) + kIm2colSlack, 0);
    b.cols.assign(cols_bytes + kIm2colSlack, 0);
    b.sums.assign(sums_ints, 0);
    b.pool.assign(pool_doubles, 0.0);
    b.planes.assign(plane_floats, 0.0f);
    b.flat.assign(size_t(flat_floats_) * size_t(images_), 0.0f);
    b.inputs.assign(max_inputs, nullptr);
  }
  for (size_t i = 0; i < graph_.outputs.size(); ++i)
    staged_outputs_.emplace_back(size_t(graph_.output_elements(i)) * size_t(max_batch_));
  for (auto& v : staged_outputs_) staged_pointers_.push_back(v.data());
  summary_ = fmt::format(
      "cpu int8: {} steps ({} conv2d/dense + relu/tanh fused, {} one-channel convolutions with output pixels across "
      "the lanes), int8 products with int32 sums ({}), inputs of conv2d/dense "
      "quantized per tensor (calibrated ranges), weights per output channel, values NHWC in float; {} images per chunk, "
      "{} threads, batches up to {}; the same bits for any batch split, thread count and instruction set",
      steps_.size(), fused, planes, gemm_.name, images_, workers, max_batch_);
}

void Int8Executable::plane_conv(const Step& s, const float* x, float* y, int count, Buffers& b) const {
  const formats::Window2D& w = *s.win;
  const int wp = w.pad_left + s.in.width + w.pad_right;
  const size_t bytes = size_t(w.pad_top + s.in.height + w.pad_bottom) * size_t(wp);
  for (int i = 0; i < count; ++i)
    quantize_padded(x + i * s.in_elements, s.in, w, s.in_scale, b.padded.data() + i * bytes, gemm_.quantize);
  PlaneConv c;
  c.out_h = s.conv_out.height;
  c.out_w = s.conv_out.width;
  c.groups = s.groups.data();
  c.taps = s.taps.data();
  c.tap_offsets = s.tap_offsets.data();
  c.tap_groups = int(s.tap_offsets.size());
  c.n = s.n;
  c.offset = s.offset.data();
  c.scale = s.scale.data();
  c.bias = s.bias.data();
  c.act = s.act;
  c.pool = s.pool;
  c.scratch = b.planes.data();
  for (int i = 0; i < count; ++i) {
    c.padded = b.padded.data() + i * bytes;
    c.y = y + i * s.out_elements;
    gemm_.plane_conv(c);
  }
}

void Int8Executable::conv(const Step& s, const float* x, float* y, Buffers& b) const {
  const formats::Window2D& w = *s.win;
  quantize_padded(x, s.in, w, s.in_scale, b.padded.data(), gemm_.quantize);
  const int pixels = s.out.height * s.out.width;
  const bool direct = w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 && w.stride_w == 1 && w.pad_top == 0 &&
                      w.pad_left == 0 && w.pad_bottom == 0 && w.pad_right == 0 && s.kp == s.in.channels;
  for (int first = 0; first < pixels; first += kPixelTile) {
    const int rows = std::min(kPixelTile, pixels - first);
    const uint8_t* a = b.padded.data() + int64_t(first) * s.kp;
    if (!direct) {
      im2col(b.padded.data(), s.in, w, s.out.width, first, rows, s.kp, b.cols.data());
      a = b.cols.data();
    }
    gemm_.gemm(a, rows, s.kp, s.packed.data(), s.n, b.sums.data(), s.ldc);
    gemm_.requantize_rows(b.sums.data(), s.ldc, rows, s.n, s.offset.data(), s.scale.data(), s.bias.data(), s.act,
                    y + int64_t(first) * s.n);
  }
}

void Int8Executable::run_chunk(const void* input, int first, int count, std::span<float* const> outputs,
                               Buffers& b) const {
  float* arena = b.arena.data();
  const auto& spec = graph_.model->input;
  const Value& in_value = graph_.values[size_t(graph_.input)];
  float* x = at(arena, graph_.input);
  for (int i = 0; i < count; ++i) {
    const int64_t sample = int64_t(first) + i;
    // [C, H, W] is made NHWC through a buffer; with one channel (or no spatial shape) they are the same.
    const bool to_nhwc = in_value.shape.size() == 3 && in_value.shape[0] > 1;
    float* nchw = to_nhwc ? b.nchw.data() : x + int64_t(i) * in_value.elements;
    if (spec.dtype == formats::InputDType::UInt8) {
      preprocess_(pre_, static_cast<const uint8_t*>(input) + sample * raw_sample_elements_, nchw);
    } else {
      std::memcpy(nchw, static_cast<const float*>(input) + sample * raw_sample_elements_,
                  size_t(in_value.elements) * sizeof(float));
    }
    if (to_nhwc) {
      const Hwc d = hwc_of(in_value.shape);
      float* dst = x + int64_t(i) * in_value.elements;
      for (int c = 0; c < d.channels; ++c)
        for (int64_t pix = 0; pix < int64_t(d.height) * d.width; ++pix)
          dst[pix * d.channels + c] = nchw[int64_t(c) * d.height * d.width + pix];
    }
  }

  for (const Step& s : steps_) {
    // Inputs as the op reads them: a flattened NHWC value in the model's (NCHW) order.
    const float** in = b.inputs.data();
    float* flat = b.flat.data();
    for (size_t k = 0; k < s.inputs.size(); ++k) {
      in[k] = at(arena, s.inputs[k]);
      const Hwc d = s.unflatten[k];
      if (d.channels == 0) continue;
      const int64_t per = int64_t(d.channels) * d.height * d.width;
      for (int i = 0; i < count; ++i) to_nchw(in[k] + i * per, d, flat + i * per);
      in[k] = flat;
      flat += count * per;
    }
    const float* a = in[0];
    float* y = at(arena, s.output);
    switch (s.op) {
      case OpType::Conv2D:
        if (s.plane) {
          plane_conv(s, a, y, count, b);
          break;
        }
        for (int i = 0; i < count; ++i) conv(s, a + i * s.in_elements, y + i * s.out_elements, b);
        break;
      case OpType::Dense: {
        for (int i = 0; i < count; ++i) {
          uint8_t* row = b.padded.data() + int64_t(i) * s.kp;
          gemm_.quantize(a + i * s.in_elements, s.in_elements, s.in_scale, row);
          std::memset(row + s.in_elements, 128, size_t(s.kp - s.in_elements));
        }
        gemm_.gemm(b.padded.data(), count, s.kp, s.packed.data(), s.n, b.sums.data(), s.ldc);
        gemm_.requantize_rows(b.sums.data(), s.ldc, count, s.n, s.offset.data(), s.scale.data(), s.bias.data(), s.act, y);
        break;
      }
      case OpType::MaxPool:
        for (int i = 0; i < count; ++i) maxpool(a + i * s.in_elements, s.in, *s.win, s.out, y + i * s.out_elements);
        break;
      case OpType::AvgPool:
        for (int i = 0; i < count; ++i)
          avgpool(a + i * s.in_elements, s.in, *s.win, s.count_include_pad, s.out, y + i * s.out_elements,
                  b.pool.data());
        break;
      case OpType::Relu: relu(a, count * s.in_elements, y); break;
      case OpType::Tanh: tanh(a, count * s.in_elements, y); break;
      case OpType::Sigmoid: sigmoid(a, count * s.in_elements, y); break;
      case OpType::Softmax:
        for (int i = 0; i < count; ++i) softmax(a + i * s.in_elements, s.in_elements, y + i * s.out_elements);
        break;
      case OpType::Add: add(a, in[1], count * s.in_elements, y); break;
      case OpType::ScaleShift:
        scale_shift(a, count * (s.in_elements / s.out.channels), s.out.channels, s.ss_scale, s.ss_shift, y);
        break;
      case OpType::Concat: {
        // NHWC: each pixel's channels are the inputs' channels one after the other.
        int64_t total = 0;
        for (int64_t part : s.parts) total += part;
        const int64_t pixels = s.out_elements / total;
        int64_t offset = 0;
        for (size_t k = 0; k < s.inputs.size(); ++k) {
          const float* src = in[k];
          const int64_t part = s.parts[k];
          for (int64_t pix = 0; pix < count * pixels; ++pix)
            std::memcpy(y + pix * total + offset, src + pix * part, size_t(part) * sizeof(float));
          offset += part;
        }
        break;
      }
      case OpType::Flatten: break;  // never a step
    }
  }

  for (size_t o = 0; o < outputs.size(); ++o) {
    const int root = graph_.storage_root(graph_.outputs[o]);
    const Value& v = graph_.values[size_t(graph_.outputs[o])];
    const Shape& stored = graph_.values[size_t(root)].shape;
    const float* src = at(arena, root);
    float* dst = outputs[o] + int64_t(first) * v.elements;
    if (stored.size() != 3) {
      std::memcpy(dst, src, size_t(count) * size_t(v.elements) * sizeof(float));
      continue;
    }
    for (int i = 0; i < count; ++i) to_nchw(src + i * v.elements, hwc_of(stored), dst + i * v.elements);
  }
}

void Int8Executable::run(const void* input, int n, std::span<float* const> outputs) {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("cpu: batch of {} samples outside 1..{}", n, max_batch_));
  if (outputs.size() != graph_.outputs.size())
    throw std::invalid_argument(
        fmt::format("cpu: expected {} output buffers, got {}", graph_.outputs.size(), outputs.size()));
  if (!input) throw std::invalid_argument("cpu: no input");
  // Each image is computed whole by one thread, and its result does not depend on which images
  // share its chunk (every product is exact, every other operation per image): the same bits for any
  // batch split and thread count.
  const int chunks = (n + images_ - 1) / images_;
  const int threads = std::min<int>(int(buffers_.size()), chunks);
  if (threads <= 1) {
    for (int c = 0; c < chunks; ++c) run_chunk(input, c * images_, std::min(images_, n - c * images_), outputs, buffers_[0]);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int c = 0; c < chunks; ++c)
    run_chunk(input, c * images_, std::min(images_, n - c * images_), outputs, buffers_[size_t(omp_get_thread_num())]);
}

}  // namespace

std::unique_ptr<Executable> make_int8_executable(const Graph& graph, const CompileOptions& options, const Int8Gemm& gemm,
                                                 PreprocessFn preprocess) {
  return std::make_unique<Int8Executable>(graph, options, gemm, preprocess);
}

}  // namespace engine::cpu::int8

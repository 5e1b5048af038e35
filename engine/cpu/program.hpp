#pragma once
// The compiled network as plain data, handed to the kernels of one instruction set
// (kernels.hpp). No standard-library types on purpose: this header is included by the
// per-instruction-set translation units, which must not instantiate shared inline code.
#include <cstdint>

namespace engine::cpu {

// Copy: `elements` floats per image from in0 to out (a concat is one Copy per input, each into its
// slice of the output). ScaleShift: per channel, y = x * weight[c] + bias[c].
enum class KOp : int { Conv, AvgPool, MaxPool, Act, Dense, Softmax, Add, ScaleShift, Copy };
enum class KAct : int { None, Relu, Tanh, Sigmoid };

// Dense weights are packed at compile time twice. `weight`: blocks of kUnitBlock output units,
// k-major inside a block, packed[(b * k + i) * kUnitBlock + j] = weight[b * kUnitBlock + j][i]
// (the tile and group kernels stream one block at a time). `weight_t`: panels of `panel` units (8
// vectors: what the single-image kernel computes at once; the last panel the remaining units rounded
// up to kUnitBlock), k-major inside a panel: unit u of panel p = u / panel, width wp, at
// packed[p * panel * k + i * wp + u % panel] (the single-image matrix-vector product reads one
// contiguous stream). Both zero past the last unit; the bias is zero-padded to whole blocks.
inline constexpr int kUnitBlock = 16;

struct KStep {
  KOp op = KOp::Act;
  KAct act = KAct::None;  // applied to every element this step writes (fused or standalone)
  // Offsets of the input(s) and output in a single-sample arena, in floats (graph arena_offset).
  int64_t in0 = 0, in1 = 0, out = 0;
  // Act/Add/Softmax/Copy: elements per sample; Dense: input length k; ScaleShift: elements per
  // channel (c_in channels).
  int64_t elements = 0;
  // Conv and pools: [C, H, W] in and out, the window.
  int c_in = 0, h_in = 0, w_in = 0, c_out = 0, h_out = 0, w_out = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0;
  bool count_include_pad = true;
  // Conv: true when the input is first copied into a zero-bordered buffer of hp x wp per channel
  // (scratch); false when that buffer would be too large (huge padding) and taps are bounds-checked.
  bool padded = false;
  int64_t hp = 0, wp = 0;
  // Conv: a 2x2 stride-2 max pool fused into the store, where the pool is the conv's only reader
  // and the single-image path runs across channels. h_out and w_out are then the conv grid the
  // kernels compute, 2 ph x 2 pw (a last odd row or column, which the pool drops, is not computed),
  // and the step's output is the pooled [c_out][ph][pw] value: per output, m = max(x, m) over the
  // window in (p, q) order from m = -inf, as the pooling step computes it, so the same bits.
  bool pool2 = false;
  // Conv: the output written zero-bordered, as the next conv (its only reader) reads it, so that
  // conv copies nothing (in_bordered): planes of out_hp x out_wp, the values from row out_pt,
  // column out_pl; the producer writes the border's zeros. out_wp = 0: plain [c][h][w].
  int64_t out_hp = 0, out_wp = 0;
  int out_pt = 0, out_pl = 0;
  bool in_bordered = false;  // Conv: the input is in the arena already as the hp x wp planes
  // Conv: an add fused into the store, y = act(conv + in1) per element (in1 a [c][h][w] value
  // computed before this step): one IEEE addition, then the activation, as the add step computes
  // it, so the same bits. Never with pool2. in1 is plain, or zero-bordered for a conv that also
  // reads it (planes of in1_hp x in1_wp, values from row in1_pt, column in1_pl; in1_wp = 0: plain).
  bool add_in1 = false;
  int64_t in1_hp = 0, in1_wp = 0;
  int in1_pt = 0, in1_pl = 0;
  // Conv, single-image path: vectorise over output channels rather than along output rows, when
  // that fills more lanes. weight_t: blocks of B = 2 x lanes output channels, [c_out_padded / B]
  // [c][p][q][B], zero past c_out.
  bool single_by_channel = false;
  const float* weight_t = nullptr;  // Dense: the panel copy of the weights (above)
  int64_t c_out_padded = 0;
  const int32_t* tap_offsets = nullptr;  // [c * kh * kw]: (c * hp + p) * wp + q, for weight_t's loop
  int units = 0;               // Dense
  int panel = 0;               // Dense: units per panel of weight_t, 8 * lanes
  const float* weight = nullptr;  // Conv: OIHW as in the model; Dense: packed (above); ScaleShift: scale
  const float* bias = nullptr;    // may be null for Conv; Dense: packed, never null; ScaleShift: shift
};

// uint8 input preprocessing (model-format-v1.md): (float(x) * scale - mean[c]) / std[c], rounded
// after each operation exactly as the reference does it, border = pad_value.
struct Preprocess {
  int channels = 0, height = 0, width = 0;  // raw
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  float scale = 1, pad_value = 0;
  const float* mean = nullptr;  // [channels]
  const float* std = nullptr;   // [channels]
};

struct Program {
  const KStep* steps = nullptr;
  int count = 0;
  int64_t arena_floats = 0;  // per sample (graph.arena_floats_per_sample)
};

// One instruction set's entry points. `lanes` images are computed side by side, one per SIMD lane:
// the tile arena holds each value as [elements][lanes]. The single-image path computes one image in
// a plain [elements] arena, vectorised along rows and units instead, with the same operation
// sequence per element, so both give the same bits.
struct KernelSet {
  const char* name = "";
  int lanes = 1;
  // `scratch` holds the zero-bordered copy of the largest padded conv input (x lanes), plus slack.
  void (*run_tile)(const Program& program, float* arena, float* scratch) = nullptr;
  void (*run_single)(const Program& program, float* arena, float* scratch) = nullptr;
  // `count` images, each in its own single-image arena `stride` floats after the previous one: the
  // single-image path per image, except that each dense layer runs for all of them at once (same
  // bits).
  void (*run_group)(const Program& program, float* arenas, int64_t stride, int count, float* scratch) = nullptr;
  // One image's raw pixels to its preprocessed [C, H', W'] floats (bitwise the reference's values).
  void (*preprocess)(const Preprocess& p, const uint8_t* raw, float* out) = nullptr;
  // `lanes` images of `elements` floats each, one after the other, to the tile layout [elements][lanes].
  void (*to_lanes)(const float* rows, int64_t elements, float* tile) = nullptr;
  // The single-image channel kernel stores its blocks to the planar layout with in-register
  // transposes and masked stores (else through a buffer, a scalar store per value).
  bool vector_planar_store = false;
};

const KernelSet* kernels_avx512();
const KernelSet* kernels_avx2();
const KernelSet& kernels_portable();

}  // namespace engine::cpu

// The fast cpu backend's kernels, written once over a SIMD type S (simd.hpp) and instantiated by
// one translation unit per instruction set, inside its own namespace (ENGINE_CPU_KERNEL_NS).
//
// Two layouts, one arithmetic. The tile path keeps S::W images side by side, one per lane: every
// value is [elements][W], so every op vectorises whatever its shape. The single-image path (for
// the few images a batch leaves over, and batch 1) keeps one image as [elements] and vectorises
// along output rows (conv) and output units (dense). Per output element both do exactly the same
// float operations in the same order:
//   conv:    acc = bias (or 0); for c, p, q: acc = fma(w, x, acc), the taps reading the zero border
//            skipped (kernel rows; columns where skips_cols; every tap on conv_generic's shapes)
//   dense:   acc = bias; for i: acc = fma(w, x_i, acc)
//   avgpool: s = 0; for valid (p, q): s = s + x; y = s * (1 / divisor)
//   maxpool: m = -inf; for valid (p, q): m = max(x, m)
//   softmax: m = max over i; e_i = exp(x_i - m); s = sum of e_i in order; y_i = e_i / s
//   then the activation, if any, elementwise with the same vector function.
// so an image's result does not depend on its lane, its tile, the thread or the batch split.
// This file must be compiled with -ffp-contract=off (no FMA the source does not ask for).
#include <cstdint>
#include <cstring>

#include "engine/cpu/program.hpp"
#include "engine/cpu/simd.hpp"

namespace engine::cpu::ENGINE_CPU_KERNEL_NS {
namespace {

template <class S>
struct K {
  using V = typename S::V;
  static constexpr int W = S::W;
  using M = VMath<S>;
  // Where the set transposes in registers and has masked partial stores and loads (store_planar).
  static constexpr bool kVectorPlanarStore = requires(V (&r)[W], float* p, V v) {
    S::transpose(r);
    S::store_first(p, v, 0);
    S::load_first(p, 0);
  };

  static V act(KAct a, V v) {
    switch (a) {
      case KAct::None: return v;
      case KAct::Relu: return S::max(v, S::zero());
      case KAct::Tanh: return M::tanh(v);
      case KAct::Sigmoid: return M::sigmoid(v);
    }
    return v;
  }

  // Stores the first `n` lanes of v (1 <= n <= W).
  static void store_part(float* p, V v, int n) {
    if (n >= W) {
      S::store(p, v);
      return;
    }
    alignas(64) float tmp[W];
    S::store(tmp, v);
    std::memcpy(p, tmp, size_t(n) * sizeof(float));
  }
  static V load_part(const float* p, int n) {
    if (n >= W) return S::load(p);
    alignas(64) float tmp[W] = {};
    std::memcpy(tmp, p, size_t(n) * sizeof(float));
    return S::load(tmp);
  }

  // The activation over n contiguous floats (the tail through a W-float buffer: same function).
  static void act_inplace(KAct a, float* p, int64_t n) {
    if (a == KAct::None) return;
    int64_t i = 0;
    for (; i + W <= n; i += W) S::store(p + i, act(a, S::load(p + i)));
    if (i < n) store_part(p + i, act(a, load_part(p + i, int(n - i))), int(n - i));
  }

  // ---- conv2d -------------------------------------------------------------------------------

  // Copies a [c][h][w] (x L lanes) value into a zero-bordered [c][hp][wp] (x L) buffer.
  static void pad_input(const KStep& s, const float* x, float* xp, int64_t L) {
    const int64_t row = int64_t(s.w_in) * L;
    for (int64_t c = 0; c < s.c_in; ++c) {
      float* plane = xp + c * s.hp * s.wp * L;
      std::memset(plane, 0, size_t(s.hp * s.wp * L) * sizeof(float));
      for (int64_t i = 0; i < s.h_in; ++i)
        std::memcpy(plane + ((i + s.pt) * s.wp + s.pl) * L, x + (c * s.h_in + i) * row, size_t(row) * sizeof(float));
    }
  }

  static bool no_padding(const KStep& s) { return s.hp == s.h_in && s.wp == s.w_in; }

  // The kernel rows [p0, p1) whose input rows exist for output row oy: the rows above and below
  // read only the zero border, and every path skips them alike (their products are zeros), so an
  // output's sum runs over the same taps in the same order on every path, as the reference's does.
  // (Alike, not merely zeros: a sum that underflowed to -0 turns +0 by adding a zero product.)
  struct Rows {
    int64_t p0, p1;
  };
  static Rows valid_rows(const KStep& s, int64_t oy) {
    const int64_t top = oy * s.sh - s.pt;
    const int64_t p0 = top < 0 ? -top : 0;
    const int64_t p1 = top + s.kh > s.h_in ? s.h_in - top : s.kh;
    return {p0 < s.kh ? p0 : s.kh, p1 > p0 ? p1 : p0};
  }

  // Columns: per kernel column q, the block's first `lo[q]` and last `hi[q]` positions (of n, from
  // output column ox) read the zero border there, and every path skips those taps alike, as it
  // skips the rows. Only for 'same' 3x3 convs at stride 1 on rows of at most kMaxColsWidth outputs
  // (on wider rows the border is a few percent of the taps, less than the skipping costs): there
  // only the first output column skips q = 0 and only the last skips q = 2, so a block's loops are
  // compiled for each of its three cases. A rule of the step, the same for every path. `edge`:
  // some position of this block skips some column.
  static constexpr int kMaxColsWidth = 8;
  struct Cols {
    int lo[3], hi[3];
    bool edge;
  };
  static bool skips_cols(const KStep& s) {
    return s.kw == 3 && s.sw == 1 && s.pl == 1 && s.w_out == s.w_in && s.w_out <= kMaxColsWidth;
  }
  static Cols valid_cols(const KStep& s, int64_t ox, int n) {
    Cols k{{0, 0, 0}, {0, 0, 0}, false};
    if (!skips_cols(s)) return k;
    k.lo[0] = ox == 0 ? 1 : 0;
    k.hi[2] = ox + n == s.w_out ? 1 : 0;
    k.edge = k.lo[0] > 0 || k.hi[2] > 0;
    return k;
  }
  // Calls f.template operator()<L, R>() for a block's case: L, its first position skips q = 0; R,
  // its last skips q = 2.
  template <class F>
  [[gnu::always_inline]] static void with_edges(const Cols& k, F&& f) {
    if (k.lo[0] > 0 && k.hi[2] > 0) return f.template operator()<1, 1>();
    if (k.lo[0] > 0) return f.template operator()<1, 0>();
    return f.template operator()<0, 1>();
  }

  // Where a conv's output value (pooled, if a pool is fused) lives: channel planes `plane` floats
  // apart, rows `row` apart, the first value at `origin` (KStep::out_wp: zero-bordered for the
  // next conv), in floats per image.
  struct OutLayout {
    int64_t plane, row, origin;
  };
  static OutLayout out_layout(const KStep& s) {
    if (s.out_wp > 0) return {s.out_hp * s.out_wp, s.out_wp, int64_t(s.out_pt) * s.out_wp + s.out_pl};
    const int64_t rows = s.pool2 ? s.h_out / 2 : s.h_out, cols = s.pool2 ? s.w_out / 2 : s.w_out;
    return {rows * cols, cols, 0};
  }
  // Where the fused add's other value lives (KStep::add_in1), in floats per image.
  static OutLayout in1_layout(const KStep& s) {
    if (s.in1_wp > 0) return {s.in1_hp * s.in1_wp, s.in1_wp, int64_t(s.in1_pt) * s.in1_wp + s.in1_pl};
    return {int64_t(s.h_out) * s.w_out, s.w_out, 0};
  }
  // The zeros around a bordered output's values (L floats each), before the conv writes them:
  // from the end of a plane's values to the next plane's first value one run; between two value
  // rows the right and left margins, stored a vector at a time even where that runs over the next
  // row's first values (the conv writes them afterwards): GCC turns a plain loop into a memset
  // call per gap, which cost more than zeroing whole planes (docs/design/cpu-backend.md).
  static void zero_border(const KStep& s, float* y, int64_t L) {
    if (s.out_wp == 0) return;
    const int64_t rows = s.pool2 ? s.h_out / 2 : s.h_out, cols = s.pool2 ? s.w_out / 2 : s.w_out;
    const int64_t row = s.out_wp * L, plane = s.out_hp * row, gap = (s.out_wp - cols) * L;
    const int64_t first = (s.out_pt * s.out_wp + s.out_pl) * L;  // a plane's first value
    const int64_t end = first + (rows - 1) * row + cols * L;      // one past its last value
    std::memset(y, 0, size_t(first) * sizeof(float));
    for (int64_t c = 0; c < s.c_out; ++c) {
      float* p = y + c * plane;
      for (int64_t r = 0; r + 1 < rows; ++r) {
        float* g = p + first + r * row + cols * L;
        int64_t i = 0;
        for (; i < gap && g + i + W <= p + plane; i += W) S::store(g + i, S::zero());
        for (; i < gap; ++i) g[i] = 0.0f;
      }
      const int64_t to = c + 1 < s.c_out ? plane + first : plane;
      std::memset(p + end, 0, size_t(to - end) * sizeof(float));
    }
  }

  // Tile path: RO output channels x RX output positions of one output row, W images per vector.
  template <int RO, int RX>
  static void conv_tile_block(const KStep& s, const float* xp, float* y, int oc, int oy, int ox) {
    V acc[RO][RX];
    for (int r = 0; r < RO; ++r) {
      const V b = s.bias ? S::set1(s.bias[oc + r]) : S::zero();
      for (int j = 0; j < RX; ++j) acc[r][j] = b;
    }
    const int64_t taps = int64_t(s.kh) * s.kw;
    const int64_t wstride = int64_t(s.c_in) * taps;
    const Rows rows = valid_rows(s, oy);
    const Cols cols = valid_cols(s, ox, RX);
    // Kernel column q for positions [Lo, RX - Hi) (the others read the zero border there).
    auto column = [&]<int Lo, int Hi>(const float* row, const float* w_p, int64_t q)
                      __attribute__((always_inline)) {
      V xv[RX];
      for (int j = Lo; j < RX - Hi; ++j) xv[j] = S::load(row + ((int64_t(ox) + j) * s.sw + q) * W);
      for (int r = 0; r < RO; ++r) {
        const V wv = S::bcast(w_p + r * wstride + q);
        for (int j = Lo; j < RX - Hi; ++j) acc[r][j] = S::fma(wv, xv[j], acc[r][j]);
      }
    };
    if (cols.edge) {
      with_edges(cols, [&]<int L, int R>() __attribute__((always_inline)) {
        for (int64_t c = 0; c < s.c_in; ++c)
          for (int64_t p = rows.p0; p < rows.p1; ++p) {
            const float* row = xp + ((c * s.hp + int64_t(oy) * s.sh + p) * s.wp) * W;
            const float* w_p = s.weight + int64_t(oc) * wstride + c * taps + p * 3;
            column.template operator()<L, 0>(row, w_p, 0);
            column.template operator()<0, 0>(row, w_p, 1);
            column.template operator()<0, R>(row, w_p, 2);
          }
      });
    } else {
      for (int64_t c = 0; c < s.c_in; ++c)
        for (int64_t p = rows.p0; p < rows.p1; ++p) {
          const float* row = xp + ((c * s.hp + int64_t(oy) * s.sh + p) * s.wp) * W;
          const float* w_p = s.weight + int64_t(oc) * wstride + c * taps + p * s.kw;
          for (int64_t q = 0; q < s.kw; ++q) column.template operator()<0, 0>(row, w_p, q);
        }
    }
    if (s.pool2) return pool2_tile<RO, RX>(s, acc, y, oc, oy, ox);
    const OutLayout o = out_layout(s);
    for (int r = 0; r < RO; ++r)
      for (int j = 0; j < RX; ++j) {
        const int64_t at = ((int64_t(oc) + r) * o.plane + o.origin + int64_t(oy) * o.row + ox + j) * W;
        V v = acc[r][j];
        if (s.add_in1) {  // the fused add's other value, at the same position of its own layout
          const OutLayout a = in1_layout(s);
          const float* in1 = y + (s.in1 - s.out) * W;
          v = S::add(v, S::load(in1 + ((int64_t(oc) + r) * a.plane + a.origin + int64_t(oy) * a.row + ox + j) * W));
        }
        S::store(y + at, act(s.act, v));
      }
  }

  // The fused 2x2/2 max pool (KStep::pool2) on the tile path: positions (ox + 2k, ox + 2k + 1) are
  // one window's columns. An even row starts each window's maximum from -inf and leaves it in the
  // pooled output; the odd row below folds its two values in: max(x, m) in (p, q) order, as
  // pool_tile does it.
  template <int RO, int RX>
  static void pool2_tile(const KStep& s, V (&acc)[RO][RX], float* y, int oc, int oy, int ox) {
    const OutLayout o = out_layout(s);
    for (int r = 0; r < RO; ++r)
      for (int k = 0; k < RX / 2; ++k) {
        float* p = y + ((int64_t(oc) + r) * o.plane + o.origin + int64_t(oy / 2) * o.row + ox / 2 + k) * W;
        V m = oy % 2 == 0 ? S::set1(-__builtin_inff()) : S::load(p);
        m = S::max(act(s.act, acc[r][2 * k]), m);
        m = S::max(act(s.act, acc[r][2 * k + 1]), m);
        S::store(p, m);
      }
  }

  // Register blocks: RO output channels x RX positions, RO * RX <= S::kAccumulators, RO, RX <= 6.
  static constexpr int kMaxBlock = 6;
  template <int RO>
  static void conv_tile_ro(const KStep& s, const float* xp, float* y, int oc, int oy, int ox, int rx) {
    constexpr int most = S::kAccumulators / RO < kMaxBlock ? S::kAccumulators / RO : kMaxBlock;
    switch (rx < most ? rx : most) {
      case 1: conv_tile_block<RO, 1>(s, xp, y, oc, oy, ox); break;
      case 2: conv_tile_block<RO, (most < 2 ? most : 2)>(s, xp, y, oc, oy, ox); break;
      case 3: conv_tile_block<RO, (most < 3 ? most : 3)>(s, xp, y, oc, oy, ox); break;
      case 4: conv_tile_block<RO, (most < 4 ? most : 4)>(s, xp, y, oc, oy, ox); break;
      case 5: conv_tile_block<RO, (most < 5 ? most : 5)>(s, xp, y, oc, oy, ox); break;
      default: conv_tile_block<RO, most>(s, xp, y, oc, oy, ox); break;
    }
  }
  // Output channels per block: all of them up to 6 (LeNet's c1), else 4 (fewer channels per block
  // leave more registers for positions, but each position's load then feeds fewer FMAs).
  static int channel_block(int c_out) { return c_out <= kMaxBlock ? c_out : 4; }

  // Splits n into chunks of at most `most`, as even as possible (10 by 3: 3, 3, 2, 2), so no
  // chunk is much narrower than the rest.
  template <class F>
  static void chunks(int n, int most, F f) {
    const int count = (n + most - 1) / most;
    if (count == 0) return;
    const int base = n / count, extra = n % count;
    int at = 0;
    for (int k = 0; k < count; ++k) {
      const int len = base + (k < extra ? 1 : 0);
      f(at, len);
      at += len;
    }
  }

  static void conv_tile(const KStep& s, float* arena, float* scratch) {
    const float* x = arena + s.in0 * W;
    float* y = arena + s.out * W;
    if (!s.padded) return conv_generic(s, x, y, W);
    const float* xp = x;
    if (!no_padding(s) && !s.in_bordered) {
      pad_input(s, x, scratch, W);
      xp = scratch;
    }
    zero_border(s, y, W);
    const int block = channel_block(s.c_out);
    // Rows in order: with a fused pool, an even row's window maxima are in the output before the
    // odd row below reads them.
    for (int oy = 0; oy < s.h_out; ++oy) {
      for (int oc = 0; oc < s.c_out; oc += block) {
        const int ro = s.c_out - oc < block ? s.c_out - oc : block;
        const int most = S::kAccumulators / ro < kMaxBlock ? S::kAccumulators / ro : kMaxBlock;
        auto run = [&](int ox, int rx) {
          switch (ro) {
            case 1: conv_tile_ro<1>(s, xp, y, oc, oy, ox, rx); break;
            case 2: conv_tile_ro<2>(s, xp, y, oc, oy, ox, rx); break;
            case 3: conv_tile_ro<3>(s, xp, y, oc, oy, ox, rx); break;
            case 4: conv_tile_ro<4>(s, xp, y, oc, oy, ox, rx); break;
            case 5: conv_tile_ro<5>(s, xp, y, oc, oy, ox, rx); break;
            default: conv_tile_ro<6>(s, xp, y, oc, oy, ox, rx); break;
          }
        };
        // A fused pool's windows never straddle two blocks: whole pairs of columns (most >= 2).
        if (s.pool2)
          chunks(s.w_out / 2, most / 2, [&](int k, int n) { run(2 * k, 2 * n); });
        else
          chunks(s.w_out, most, run);
      }
    }
  }

  // Single-image path: RO output channels x RX vectors of W consecutive output positions.
  // `valid` output positions from ox on are real; lanes past them compute garbage never stored.
  template <int RO, int RX>
  static void conv_single_block(const KStep& s, const float* xp, float* y, int oc, int oy, int ox, int valid) {
    V acc[RO][RX];
    for (int r = 0; r < RO; ++r) {
      const V b = s.bias ? S::set1(s.bias[oc + r]) : S::zero();
      for (int j = 0; j < RX; ++j) acc[r][j] = b;
    }
    const int64_t taps = int64_t(s.kh) * s.kw;
    const int64_t wstride = int64_t(s.c_in) * taps;
    const Rows rows = valid_rows(s, oy);
    const Cols cols = valid_cols(s, ox, valid);
    // Per column q and vector j, the lanes whose input column exists (edge blocks only).
    typename S::Mask mask[3][RX];
    if (cols.edge)
      for (int q = 0; q < s.kw; ++q)
        for (int j = 0; j < RX; ++j) {
          alignas(64) float in[W];
          for (int l = 0; l < W; ++l) {
            const int at = j * W + l;
            in[l] = at >= cols.lo[q] && at < valid - cols.hi[q] ? 1.0f : 0.0f;
          }
          mask[q][j] = S::lt(S::zero(), S::load(in));
        }
    for (int64_t c = 0; c < s.c_in; ++c) {
      const float* w_c = s.weight + int64_t(oc) * wstride + c * taps;
      for (int64_t p = rows.p0; p < rows.p1; ++p) {
        const float* row = xp + (c * s.hp + int64_t(oy) * s.sh + p) * s.wp;
        const float* w_p = w_c + p * s.kw;
        for (int64_t q = 0; q < s.kw; ++q) {
          V xv[RX];
          for (int j = 0; j < RX; ++j) {
            if (s.sw == 1) {
              // May read up to W - 1 floats past the row: the buffers have that much slack, and
              // those lanes are never stored.
              xv[j] = S::load(row + ox + j * W + q);
            } else {
              alignas(64) float g[W];
              for (int l = 0; l < W; ++l) {
                const int64_t o = int64_t(j) * W + l;
                g[l] = o < valid ? row[(int64_t(ox) + o) * s.sw + q] : 0.0f;
              }
              xv[j] = S::load(g);
            }
          }
          if (!cols.edge || (cols.lo[q] == 0 && cols.hi[q] == 0)) {
            for (int r = 0; r < RO; ++r) {
              const V wv = S::bcast(w_p + r * wstride + q);
              for (int j = 0; j < RX; ++j) acc[r][j] = S::fma(wv, xv[j], acc[r][j]);
            }
          } else {  // lanes whose column q is in the border keep their sums
            for (int r = 0; r < RO; ++r) {
              const V wv = S::bcast(w_p + r * wstride + q);
              for (int j = 0; j < RX; ++j)
                acc[r][j] = S::select(mask[q][j], S::fma(wv, xv[j], acc[r][j]), acc[r][j]);
            }
          }
        }
      }
    }
    for (int r = 0; r < RO; ++r)
      for (int j = 0; j < RX; ++j) {
        const int n = valid - j * W;
        if (n > 0) store_part(y + ((int64_t(oc) + r) * s.h_out + oy) * s.w_out + ox + j * W, act(s.act, acc[r][j]), n);
      }
  }

  // Single-image path, vectorised over output channels instead (when a row is much narrower than
  // the channel count, e.g. LeNet's c3: 10 positions, 16 channels): RV vectors of W channels x RX
  // output positions per register block, weights packed at compile time to
  // [channel block][c][p][q][2 W] (weight_t), and the (c, p, q) taps one flat loop over their input offsets
  // (tap_offsets, (c * hp + p) * wp + q): two pointers and RV + RX loads per tap.
  //
  // Positions: RX consecutive positions of one output row, or, where the padded-width grid has no
  // column past w_out (1-wide kernels at stride 1), a run of RX consecutive "columns" of the grid
  // (f = oy * wp + ox) across rows, whose inputs are RX consecutive floats from tap offset + f.
  // Either way the block's positions are consecutive outputs. `row`: the fused pool's buffer
  // (pool2_single), unused otherwise.
  template <int RV, int RX>
  static void conv_oc_block(const KStep& s, const float* x0, float* y, int oc, int64_t f0, int64_t xstep, float* row) {
    V acc[RV][RX];
    for (int v = 0; v < RV; ++v) {
      const int n = s.c_out - oc - v * W;
      const V b = s.bias ? load_part(s.bias + oc + v * W, n < W ? n : W) : S::zero();
      for (int j = 0; j < RX; ++j) acc[v][j] = b;
    }
    const int64_t taps = int64_t(s.c_in) * s.kh * s.kw;
    const int32_t* off = s.tap_offsets;
    // This block's weights: [tap][2 W] from block oc / (2 W) on (oc is a multiple of 2 W).
    const float* wb = s.weight_t + int64_t(oc) * taps;
    const int64_t wstep = 2 * W;
    // Taps [t0, t1) of the flat (c, p, q) loop.
    // Inlined into each caller, as tap_part: the accumulators stay in registers.
    auto run = [&](int64_t t0, int64_t t1) __attribute__((always_inline)) {
      const float* w = wb + t0 * wstep;
      for (int64_t t = t0; t < t1; ++t, w += wstep) {
        const float* xt = x0 + off[t];
        V wv[RV];
        for (int v = 0; v < RV; ++v) wv[v] = S::load(w + v * W);
        // Unrolled in full, or GCC keeps a 24-accumulator block on the stack.
#pragma GCC unroll 32
        for (int j = 0; j < RX; ++j) {
          const V xb = S::bcast(xt + j * xstep);
#pragma GCC unroll 4
          for (int v = 0; v < RV; ++v) acc[v][j] = S::fma(wv[v], xb, acc[v][j]);
        }
      }
    };
    // Tap t for positions [Lo, RX - Hi) of the block only (the others' column is in the border).
    auto tap_part = [&]<int Lo, int Hi>(int64_t t) __attribute__((always_inline)) {
      const float* xt = x0 + off[t];
      const float* w = wb + t * wstep;
      V wv[RV];
      for (int v = 0; v < RV; ++v) wv[v] = S::load(w + v * W);
#pragma GCC unroll 32
      for (int j = Lo; j < RX - Hi; ++j) {
        const V xb = S::bcast(xt + j * xstep);
#pragma GCC unroll 4
        for (int v = 0; v < RV; ++v) acc[v][j] = S::fma(wv[v], xb, acc[v][j]);
      }
    };
    // Rows and columns that read only the zero border skipped (valid_rows, valid_cols): one run
    // per input channel, or in an edge block each (c, p)'s three columns unrolled. The block's
    // positions are one output row's (a flat block: 1-wide kernels, no vertical padding).
    const Rows rows = valid_rows(s, f0 / s.wp);
    const Cols cols = valid_cols(s, f0 % s.wp, RX);
    const int64_t per_c = int64_t(s.kh) * s.kw;
    if (cols.edge) {
      with_edges(cols, [&]<int L, int R>() __attribute__((always_inline)) {
        for (int64_t c = 0; c < s.c_in; ++c)
          for (int64_t p = rows.p0; p < rows.p1; ++p) {
            const int64_t t = c * per_c + p * 3;
            tap_part.template operator()<L, 0>(t);
            tap_part.template operator()<0, 0>(t + 1);
            tap_part.template operator()<0, R>(t + 2);
          }
      });
    } else if (rows.p0 == 0 && rows.p1 == s.kh) {
      run(0, taps);
    } else {
      for (int64_t c = 0; c < s.c_in; ++c) run(c * per_c + rows.p0 * s.kw, c * per_c + rows.p1 * s.kw);
    }
    if (!s.add_in1)
      for (int v = 0; v < RV; ++v)
        for (int j = 0; j < RX; ++j) acc[v][j] = act(s.act, acc[v][j]);
    if (s.pool2) return pool2_single<RV, RX>(s, acc, y, oc, f0, row);
    // f0 = oy * wp + ox, and the block's positions are consecutive outputs: one output row's
    // (row by row), or consecutive rows' where wp == w_out (flat, never with a bordered output).
    const OutLayout o = out_layout(s);
    const int64_t oy = f0 / s.wp, ox = f0 % s.wp;
    float* out = y + int64_t(oc) * o.plane + o.origin + oy * o.row + ox;
    if (!s.add_in1) return store_planar<RV, RX>(s, acc, out, o.plane, oc, RX);
    const OutLayout a = in1_layout(s);
    const float* in1 = y + (s.in1 - s.out) + int64_t(oc) * a.plane + a.origin + oy * a.row + ox;
    store_planar<RV, RX>(s, acc, out, o.plane, oc, RX, in1, a.plane);
  }

  // The fused add (KStep::add_in1) on the single-image path where the stores go through a buffer,
  // over the sums just stored: per channel a run of `count` positions, y = y + r (one IEEE
  // addition), then the activation.
  static void add_act_runs(const KStep& s, float* y, const float* r, int64_t plane, int64_t r_plane, int channels,
                           int count) {
    const int whole = count - count % W;
    for (int l = 0; l < channels; ++l, y += plane, r += r_plane) {
      for (int k = 0; k < whole; k += W) S::store(y + k, act(s.act, S::add(S::load(y + k), S::load(r + k))));
      for (int k = whole; k < count; ++k) y[k] = y[k] + r[k];
      act_inplace(s.act, y + whole, count - whole);
    }
  }

  // The fused 2x2/2 max pool (KStep::pool2) on the single-image path: positions (2k, 2k + 1) of the
  // block are one window's columns. An even row leaves each window's maximum so far in `row`
  // ([pw][2 W]: this channel block's, channels across the lanes); the odd row below folds its two
  // values in and stores the pooled values. max(x, m) in (p, q) order from -inf, as pool_single.
  template <int RV, int RX>
  static void pool2_single(const KStep& s, V (&acc)[RV][RX], float* y, int oc, int64_t f0, float* row) {
    constexpr int P = RX / 2 > 0 ? RX / 2 : 1;
    const int64_t oy = f0 / s.wp, ox = f0 % s.wp;
    const bool even = oy % 2 == 0;
    V m[RV][P];
    for (int v = 0; v < RV; ++v)
      for (int k = 0; k < RX / 2; ++k) {
        float* b = row + (ox / 2 + k) * 2 * W + v * W;
        V a = even ? S::set1(-__builtin_inff()) : S::load(b);
        a = S::max(acc[v][2 * k], a);
        a = S::max(acc[v][2 * k + 1], a);
        if (even)
          S::store(b, a);
        else
          m[v][k] = a;
      }
    if (even) return;
    const OutLayout o = out_layout(s);
    store_planar<RV, P>(s, m, y + int64_t(oc) * o.plane + o.origin + oy / 2 * o.row + ox / 2, o.plane, oc, RX / 2);
  }

  // Stores `count` consecutive output positions of RV vectors of channels (from oc) to the planar
  // [c][h][w] output, `out` at channel oc's first one: each channel's positions as one run. Where
  // the set transposes in registers and has a masked store (AVX-512): W positions x W channels at a
  // time, each channel's run one masked store (measured slower on AVX2). Otherwise through a
  // buffer, channel by channel: position-major scalar stores touched RV * W lines per position,
  // which on 32x32 planes (4 KiB apart) all fall in one L1 set and evicted each other.
  // With `res` (the fused add's other value at out's first position, its channels r_plane apart):
  // each value is the sum plus res, then the activation (vals hold the sums).
  template <int RV, int N>
  static void store_planar(const KStep& s, V (&vals)[RV][N], float* out, int64_t plane, int oc, int count,
                           const float* res = nullptr, int64_t r_plane = 0) {
    const int channels = s.c_out - oc < RV * W ? s.c_out - oc : RV * W;
    if constexpr (kVectorPlanarStore) {
      for (int v = 0; v < RV; ++v) {
        const int n = channels - v * W < W ? channels - v * W : W;
        for (int j0 = 0; j0 < count; j0 += W) {
          V r[W];
          for (int l = 0; l < W; ++l) r[l] = j0 + l < count ? vals[v][j0 + l < N ? j0 + l : 0] : S::zero();
          S::transpose(r);
          const int cnt = count - j0 < W ? count - j0 : W;
          for (int l = 0; l < n; ++l) {
            const int64_t ch = int64_t(v) * W + l;
            // Added in registers: a load of values just written by masked stores would wait for them.
            if (res) r[l] = act(s.act, S::add(r[l], S::load_first(res + ch * r_plane + j0, cnt)));
            S::store_first(out + ch * plane + j0, r[l], cnt);
          }
        }
      }
    } else {
      alignas(64) float t[N][RV * W];
      for (int j = 0; j < count; ++j)
        for (int v = 0; v < RV; ++v) S::store(&t[j][v * W], vals[v][j]);
      for (int l = 0; l < channels; ++l)
        for (int k = 0; k < count; ++k) out[l * plane + k] = t[k][l];
      if (res) add_act_runs(s, out, res, plane, r_plane, channels, count);
    }
  }

  // Register blocks: RV * RX accumulators (all of kAccumulators), RX <= kMaxOcPositions.
  static constexpr int kMaxOcPositions = S::kAccumulators;
  template <int RV, int RX = 1>
  static void conv_oc_rx(const KStep& s, const float* x0, float* y, int oc, int64_t f0, int64_t xstep, int rx,
                         float* row) {
    if constexpr (RX < kMaxOcPositions && RV * RX < S::kAccumulators) {
      if (rx > RX) return conv_oc_rx<RV, RX + 1>(s, x0, y, oc, f0, xstep, rx, row);
    }
    conv_oc_block<RV, RX>(s, x0, y, oc, f0, xstep, row);
  }

  static void conv_single_by_channel(const KStep& s, const float* xp, float* y, float* row) {
    // Flat only where the grid drops no column (1-wide kernels, unpadded full-width rows): row by
    // row was as fast or faster wherever columns were dropped, 32-wide rows included, and 8- and
    // 7-wide rows lost a fifth of the grid flat (docs/design/cpu-backend.md). A fused pool goes row
    // by row, its windows' columns in pairs within a block.
    const bool flat = s.sw == 1 && s.sh == 1 && s.wp == s.w_out && s.hp == s.h_in && !s.pool2 && s.out_wp == 0 &&
                      s.in1_wp == 0;
    for (int oc = 0; oc < s.c_out; oc += 2 * W) {
      const int rv = s.c_out - oc > W ? 2 : 1;
      const int most = S::kAccumulators / rv;
      if (flat) {
        // Every column of the padded-width grid up to the last output, in runs of `most`.
        const int64_t end = int64_t(s.h_out - 1) * s.wp + s.w_out;
        for (int64_t f = 0; f < end; f += most) {
          const int rx = end - f < most ? int(end - f) : most;
          if (rv == 2)
            conv_oc_rx<2>(s, xp + f, y, oc, f, 1, rx, row);
          else
            conv_oc_rx<1>(s, xp + f, y, oc, f, 1, rx, row);
        }
        continue;
      }
      for (int oy = 0; oy < s.h_out; ++oy) {
        auto run = [&](int ox, int rx) {
          const float* x0 = xp + int64_t(oy) * s.sh * s.wp + int64_t(ox) * s.sw;
          const int64_t f = int64_t(oy) * s.wp + ox;
          if (rv == 2)
            conv_oc_rx<2>(s, x0, y, oc, f, s.sw, rx, row);
          else
            conv_oc_rx<1>(s, x0, y, oc, f, s.sw, rx, row);
        };
        if (s.pool2)
          chunks(s.w_out / 2, most / 2, [&](int k, int n) { run(2 * k, 2 * n); });
        else
          chunks(s.w_out, most, run);
      }
    }
  }

  // The fused pool's row buffer in the scratch, after the padded input copy (its size: the
  // executable's scratch_floats).
  static float* pool_row(const KStep& s, float* scratch) {
    return scratch + (int64_t(s.c_in) * s.hp * s.wp + 15) / 16 * 16;
  }

  template <int RO>
  static void conv_single_ro(const KStep& s, const float* xp, float* y, int oc, int oy, int ox, int valid) {
    if (valid > W)
      conv_single_block<RO, 2>(s, xp, y, oc, oy, ox, valid);
    else
      conv_single_block<RO, 1>(s, xp, y, oc, oy, ox, valid);
  }

  static void conv_single(const KStep& s, float* arena, float* scratch) {
    const float* x = arena + s.in0;
    float* y = arena + s.out;
    if (!s.padded) return conv_generic(s, x, y, 1);
    const float* xp = x;
    if (!no_padding(s) && !s.in_bordered) {
      pad_input(s, x, scratch, 1);
      xp = scratch;
    }
    zero_border(s, y, 1);
    if (s.single_by_channel) return conv_single_by_channel(s, xp, y, pool_row(s, scratch));
    const int block = channel_block(s.c_out);
    for (int oy = 0; oy < s.h_out; ++oy)
      for (int oc = 0; oc < s.c_out; oc += block) {
        const int ro = s.c_out - oc < block ? s.c_out - oc : block;
        for (int ox = 0; ox < s.w_out; ox += 2 * W) {
          const int valid = s.w_out - ox < 2 * W ? s.w_out - ox : 2 * W;
          switch (ro) {
            case 1: conv_single_ro<1>(s, xp, y, oc, oy, ox, valid); break;
            case 2: conv_single_ro<2>(s, xp, y, oc, oy, ox, valid); break;
            case 3: conv_single_ro<3>(s, xp, y, oc, oy, ox, valid); break;
            case 4: conv_single_ro<4>(s, xp, y, oc, oy, ox, valid); break;
            case 5: conv_single_ro<5>(s, xp, y, oc, oy, ox, valid); break;
            default: conv_single_ro<6>(s, xp, y, oc, oy, ox, valid); break;
          }
        }
      }
  }

  // Rare shapes (padding so large that a padded copy would not fit the scratch limit): every tap
  // bounds-checked, the taps in the border skipped (on every path alike). L = W for
  // a tile (a vector per tap), 1 for a single image (fma1).
  static void conv_generic(const KStep& s, const float* x, float* y, int64_t L) {
    const int64_t taps = int64_t(s.kh) * s.kw;
    for (int64_t o = 0; o < s.c_out; ++o)
      for (int64_t i = 0; i < s.h_out; ++i)
        for (int64_t j = 0; j < s.w_out; ++j) {
          float* out = y + ((o * s.h_out + i) * s.w_out + j) * L;
          const float b = s.bias ? s.bias[o] : 0.0f;
          V acc = S::set1(b);
          float acc1 = b;
          for (int64_t c = 0; c < s.c_in; ++c)
            for (int64_t p = 0; p < s.kh; ++p) {
              const int64_t iy = i * s.sh + p - s.pt;
              for (int64_t q = 0; q < s.kw; ++q) {
                const int64_t ix = j * s.sw + q - s.pl;
                if (iy < 0 || iy >= s.h_in || ix < 0 || ix >= s.w_in) continue;
                const float w = s.weight[(o * s.c_in + c) * taps + p * s.kw + q];
                const float* px = x + ((c * s.h_in + iy) * s.w_in + ix) * L;
                if (L == W)
                  acc = S::fma(S::set1(w), S::load(px), acc);
                else
                  acc1 = S::fma1(w, *px, acc1);
              }
            }
          if (L == W)
            S::store(out, act(s.act, acc));
          else
            store_part(out, act(s.act, S::set1(acc1)), 1);
        }
  }

  // ---- pooling ------------------------------------------------------------------------------

  // Valid window rows/cols of output (i, j): [p0, p1) x [q0, q1), in 64 bits (huge windows).
  struct Win {
    int64_t top, left, p0, p1, q0, q1;
  };
  static Win window(const KStep& s, int64_t i, int64_t j) {
    Win w;
    w.top = i * s.sh - s.pt;
    w.left = j * s.sw - s.pl;
    w.p0 = w.top < 0 ? -w.top : 0;
    w.p1 = s.h_in - w.top < s.kh ? s.h_in - w.top : s.kh;
    w.q0 = w.left < 0 ? -w.left : 0;
    w.q1 = s.w_in - w.left < s.kw ? s.w_in - w.left : s.kw;
    return w;
  }
  // avgpool multiplies the sum by the float reciprocal of its divisor: a division per output cost
  // as much as the whole pooling on a single image. (0 when the window holds no input: output 0.)
  static float reciprocal(const KStep& s, const Win& w) {
    const int64_t rows = w.p1 > w.p0 ? w.p1 - w.p0 : 0, cols = w.q1 > w.q0 ? w.q1 - w.q0 : 0;
    const float d = s.count_include_pad ? float(int64_t(s.kh) * s.kw) : float(rows * cols);
    return d > 0 ? 1.0f / d : 0.0f;
  }

  // Tile path: a vector over the lanes.
  template <bool kMax>
  static void pool_tile(const KStep& s, const float* x, float* y) {
    for (int64_t c = 0; c < s.c_out; ++c)
      for (int64_t i = 0; i < s.h_out; ++i)
        for (int64_t j = 0; j < s.w_out; ++j) {
          const Win w = window(s, i, j);
          const float* xc = x + c * s.h_in * s.w_in * W;
          V a = kMax ? S::set1(-__builtin_inff()) : S::zero();
          for (int64_t p = w.p0; p < w.p1; ++p)
            for (int64_t q = w.q0; q < w.q1; ++q) {
              const V v = S::load(xc + ((w.top + p) * s.w_in + w.left + q) * W);
              a = kMax ? S::max(v, a) : S::add(a, v);
            }
          if (!kMax) a = S::mul(a, S::set1(reciprocal(s, w)));
          S::store(y + ((c * s.h_out + i) * s.w_out + j) * W, a);
        }
  }

  // Single-image path: the same operations on one lane. Pooling steps carry no activation (only
  // conv and dense get one fused).
  template <bool kMax>
  static void pool_single(const KStep& s, const float* x, float* y) {
    if (whole_windows(s)) return pool_single_whole<kMax>(s, x, y);
    for (int64_t c = 0; c < s.c_out; ++c) {
      const float* xc = x + c * s.h_in * s.w_in;
      float* yc = y + c * s.h_out * s.w_out;
      for (int64_t i = 0; i < s.h_out; ++i) {
        const Win row = window(s, i, 0);
        for (int64_t j = 0; j < s.w_out; ++j) {
          const Win w = window(s, i, j);
          const float* xr = xc + (row.top + row.p0) * s.w_in + w.left;
          float a = kMax ? -__builtin_inff() : 0.0f;
          for (int64_t p = row.p0; p < row.p1; ++p, xr += s.w_in)
            for (int64_t q = w.q0; q < w.q1; ++q) {
              const float v = xr[q];
              a = kMax ? (v > a ? v : a) : a + v;  // maxps(v, a) on one lane
            }
          if (!kMax) a = a * reciprocal(s, w);
          yc[i * s.w_out + j] = a;
        }
      }
    }
  }

  // True when every window lies inside the input (no padding, none cut by the edge): one divisor.
  static bool whole_windows(const KStep& s) {
    return s.pt == 0 && s.pl == 0 && int64_t(s.h_out - 1) * s.sh + s.kh <= s.h_in &&
           int64_t(s.w_out - 1) * s.sw + s.kw <= s.w_in;
  }

  // Single-image pooling with whole windows, vectorised along the input columns: for each output
  // row, the window fold runs at every input column a window may start at (W at a time, in the
  // same (p, q) order as above, so each output's value is the same), and the columns a window does
  // start at (every sw-th) are copied out. With sw = 2 half the work is discarded; still some 4x
  // fewer instructions than one window at a time.
  template <bool kMax>
  static void pool_single_whole(const KStep& s, const float* x, float* y) {
    constexpr int kChunk = 256;  // starting columns per pass (a stack buffer)
    alignas(64) float a[kChunk + W];
    const int64_t starts = int64_t(s.w_out - 1) * s.sw + 1;
    const V recip = S::set1(1.0f / float(int64_t(s.kh) * s.kw));
    for (int64_t c = 0; c < s.c_out; ++c) {
      const float* xc = x + c * s.h_in * s.w_in;
      float* yc = y + c * s.h_out * s.w_out;
      for (int64_t i = 0; i < s.h_out; ++i) {
        const float* top = xc + i * s.sh * s.w_in;
        for (int64_t c0 = 0; c0 < starts; c0 += kChunk) {
          const int64_t n = starts - c0 < kChunk ? starts - c0 : kChunk;
          for (int64_t k = 0; k < n; k += W) {
            // Lanes past n read at most W - 1 floats past the window's last column: the buffers
            // have that much slack, and those lanes are never copied out.
            V v = kMax ? S::set1(-__builtin_inff()) : S::zero();
            for (int64_t p = 0; p < s.kh; ++p)
              for (int64_t q = 0; q < s.kw; ++q) {
                const V t = S::load(top + p * s.w_in + c0 + k + q);
                v = kMax ? S::max(t, v) : S::add(v, t);
              }
            if (!kMax) v = S::mul(v, recip);
            S::store(a + k, v);
          }
          // Output columns whose window starts in [c0, c0 + n).
          for (int64_t j = (c0 + s.sw - 1) / s.sw; j < s.w_out && j * s.sw < c0 + n; ++j)
            yc[i * s.w_out + j] = a[j * s.sw - c0];
        }
      }
    }
  }

  // ---- dense --------------------------------------------------------------------------------

  // Tile path: UP units of a block at a time (as many accumulators as the registers allow) for W
  // images; each weight is broadcast once per tile.
  static constexpr int UP = S::kAccumulators >= kUnitBlock ? kUnitBlock : 8;
  static void dense_tile(const KStep& s, float* arena) {
    const float* x = arena + s.in0 * W;
    float* y = arena + s.out * W;
    const int64_t k = s.elements;
    const int blocks = (s.units + kUnitBlock - 1) / kUnitBlock;
    for (int b = 0; b < blocks; ++b)
      for (int h = 0; h < kUnitBlock && b * kUnitBlock + h < s.units; h += UP) {
        V acc[UP];
        const float* bias = s.bias + int64_t(b) * kUnitBlock + h;
        for (int u = 0; u < UP; ++u) acc[u] = S::bcast(bias + u);
        const float* w = s.weight + int64_t(b) * k * kUnitBlock + h;
        for (int64_t i = 0; i < k; ++i) {
          const V xv = S::load(x + i * W);
          const float* wi = w + i * kUnitBlock;
          for (int u = 0; u < UP; ++u) acc[u] = S::fma(S::bcast(wi + u), xv, acc[u]);
        }
        const int first = b * kUnitBlock + h;
        const int n = s.units - first < UP ? s.units - first : UP;
        for (int u = 0; u < n; ++u) S::store(y + (int64_t(first) + u) * W, act(s.act, acc[u]));
      }
  }

  // Single-image path, a matrix-vector product bound by the weights' bandwidth: RB blocks of
  // kUnitBlock units at once (NV vectors each), x broadcast, the weights read from the panel copy
  // (program.hpp). A panel is 8 vectors, the RB blocks of dense_single's main loop, so each k reads
  // them as one contiguous run of a single stream (the last blocks, one at a time, part of a row).
  static constexpr int NV = kUnitBlock / W;
  template <int RB>
  static void dense_single_blocks(const KStep& s, const float* x, float* y, int b0) {
    const int64_t k = s.elements;
    const int64_t first = int64_t(b0) * kUnitBlock / s.panel * s.panel;
    const int64_t padded = (int64_t(s.units) + kUnitBlock - 1) / kUnitBlock * kUnitBlock;
    const int64_t ws = padded - first < s.panel ? padded - first : s.panel;  // floats per k
    const float* w0 = s.weight_t + first * k + (int64_t(b0) * kUnitBlock - first);
    V acc[RB][NV];
    for (int r = 0; r < RB; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = S::load(s.bias + int64_t(b0 + r) * kUnitBlock + v * W);
    for (int64_t i = 0; i < k; ++i) {
      const V xb = S::bcast(x + i);
      const float* w = w0 + i * ws;
      for (int r = 0; r < RB; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = S::fma(S::load(w + r * kUnitBlock + v * W), xb, acc[r][v]);
    }
    for (int r = 0; r < RB; ++r)
      for (int v = 0; v < NV; ++v) {
        const int first = (b0 + r) * kUnitBlock + v * W;
        const int n = s.units - first;
        if (n > 0) store_part(y + first, act(s.act, acc[r][v]), n);
      }
  }

  static void dense_single(const KStep& s, float* arena) {
    const float* x = arena + s.in0;
    float* y = arena + s.out;
    const int blocks = (s.units + kUnitBlock - 1) / kUnitBlock;
    // Enough independent accumulators to cover the FMA latency: 8 vectors in flight (one panel).
    constexpr int most = 8 / NV > 0 ? 8 / NV : 1;
    int b = 0;
    for (; b + most <= blocks; b += most) dense_single_blocks<most>(s, x, y, b);
    for (; b < blocks; ++b) dense_single_blocks<1>(s, x, y, b);
  }

  // Image groups: `count` images, each in its own single-image arena `stride` floats after the
  // previous one. MR images x NB vectors of units per register block (NB * W units: one or two
  // packed blocks), the k loop cut into chunks of KC whose partial sums wait in y between chunks:
  // an fp32 accumulator stored and reloaded is the same value, so every output is still
  // acc = bias; acc = fma(w_i, x_i, acc) for i = 0..k-1, bitwise dense_single's.
  static constexpr int NB = W >= kUnitBlock ? 2 : kUnitBlock / W;  // vectors per image in a block
  static constexpr int MR = S::kAccumulators / NB;                   // images per register block
  static constexpr int64_t KC = 512;

  template <int R>
  static void dense_group_block(const KStep& s, float* arena, int64_t stride, int g0, int u0, int64_t i0,
                                int64_t i1) {
    const int64_t k = s.elements;
    // NB vectors of W units from u0 on; unit block b = u / kUnitBlock holds per_block of them.
    const float* wv[NB];
    bool real[NB];
    for (int v = 0; v < NB; ++v) {
      const int u = u0 + v * W;
      real[v] = u < s.units;
      const int b = real[v] ? u / kUnitBlock : u0 / kUnitBlock;
      wv[v] = s.weight + int64_t(b) * k * kUnitBlock + (real[v] ? u % kUnitBlock : 0);
    }
    V acc[R][NB];
    const float* x[R];
    float* y[R];
    for (int r = 0; r < R; ++r) {
      float* a = arena + int64_t(g0 + r) * stride;
      x[r] = a + s.in0;
      y[r] = a + s.out + u0;
      for (int v = 0; v < NB; ++v)
        acc[r][v] = !real[v] ? S::zero() : i0 == 0 ? S::load(s.bias + u0 + v * W) : S::load(y[r] + v * W);
    }
    for (int64_t i = i0; i < i1; ++i) {
      V w[NB];
      for (int v = 0; v < NB; ++v) w[v] = S::load(wv[v] + i * kUnitBlock);
      for (int r = 0; r < R; ++r) {
        const V xb = S::bcast(x[r] + i);
        for (int v = 0; v < NB; ++v) acc[r][v] = S::fma(w[v], xb, acc[r][v]);
      }
    }
    const bool last = i1 == k;
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NB; ++v) {
        if (!real[v]) continue;
        const int n = s.units - (u0 + v * W);
        if (last)
          store_part(y[r] + v * W, act(s.act, acc[r][v]), n);
        else
          store_part(y[r] + v * W, acc[r][v], n);
      }
  }

  static void dense_group(const KStep& s, float* arena, int64_t stride, int count) {
    const int64_t k = s.elements;
    // Partial sums of the lanes past `units` would be lost between chunks: a layer whose units do not
    // fill whole vectors keeps all of k in one chunk.
    const int64_t kc = s.units % W == 0 ? KC : k;
    for (int64_t i0 = 0; i0 < k; i0 += kc) {
      const int64_t i1 = i0 + kc < k ? i0 + kc : k;
      for (int u0 = 0; u0 < s.units; u0 += NB * W) {
        int g = 0;
        for (; g + MR <= count; g += MR) dense_group_block<MR>(s, arena, stride, g, u0, i0, i1);
        const int rest = count - g;
        if (rest > 0) dense_group_rest(s, arena, stride, g, rest, u0, i0, i1);
      }
    }
  }
  template <int R = 1>
  static void dense_group_rest(const KStep& s, float* arena, int64_t stride, int g, int rest, int u0, int64_t i0,
                               int64_t i1) {
    if constexpr (R < MR) {
      if (rest == R) return dense_group_block<R>(s, arena, stride, g, u0, i0, i1);
      return dense_group_rest<R + 1>(s, arena, stride, g, rest, u0, i0, i1);
    }
  }

  // ---- softmax, add, activations ------------------------------------------------------------

  static void softmax_tile(const KStep& s, float* arena) {
    const float* x = arena + s.in0 * W;
    float* y = arena + s.out * W;
    const int64_t k = s.elements;
    if (k <= 0) return;
    V m = S::load(x);
    for (int64_t i = 1; i < k; ++i) m = S::max(S::load(x + i * W), m);
    V sum = S::zero();
    for (int64_t i = 0; i < k; ++i) {
      const V e = M::exp(S::sub(S::load(x + i * W), m));
      S::store(y + i * W, e);
      sum = S::add(sum, e);
    }
    for (int64_t i = 0; i < k; ++i) S::store(y + i * W, S::div(S::load(y + i * W), sum));
  }

  static void softmax_single(const KStep& s, float* arena) {
    const float* x = arena + s.in0;
    float* y = arena + s.out;
    const int64_t k = s.elements;
    if (k <= 0) return;
    float m = x[0];
    for (int64_t i = 1; i < k; ++i) m = x[i] > m ? x[i] : m;  // maxps(x_i, m)
    for (int64_t i = 0; i < k; ++i) y[i] = x[i] - m;
    int64_t i = 0;
    for (; i + W <= k; i += W) S::store(y + i, M::exp(S::load(y + i)));
    if (i < k) store_part(y + i, M::exp(load_part(y + i, int(k - i))), int(k - i));
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum = sum + y[j];
    for (int64_t j = 0; j < k; ++j) y[j] = y[j] / sum;
  }

  static void add(const KStep& s, float* arena, int64_t L) {
    const float* a = arena + s.in0 * L;
    const float* b = arena + s.in1 * L;
    float* y = arena + s.out * L;
    const int64_t n = s.elements * L;
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
    act_inplace(s.act, y, n);
  }

  // Two roundings per element (multiply, then add; no FMA: -ffp-contract=off), the same in either
  // layout, so lanes and single images agree bit for bit.
  static void scale_shift(const KStep& s, float* arena, int64_t L) {
    const float* x = arena + s.in0 * L;
    float* y = arena + s.out * L;
    const int64_t n = s.elements * L;  // per channel
    for (int64_t c = 0; c < s.c_in; ++c) {
      const float scale = s.weight[c], shift = s.bias[c];
      const float* xc = x + c * n;
      float* yc = y + c * n;
      for (int64_t i = 0; i < n; ++i) {
        const float product = xc[i] * scale;
        yc[i] = product + shift;
      }
    }
    act_inplace(s.act, y, s.c_in * n);
  }

  // A value is contiguous per image ([elements] or [elements][L]), so a concat input's slice of
  // the output is contiguous too.
  static void copy(const KStep& s, float* arena, int64_t L) {
    std::memcpy(arena + s.out * L, arena + s.in0 * L, size_t(s.elements * L) * sizeof(float));
  }

  static void elementwise(const KStep& s, float* arena, int64_t L) {
    const float* x = arena + s.in0 * L;
    float* y = arena + s.out * L;
    const int64_t n = s.elements * L;
    if (y != x) std::memcpy(y, x, size_t(n) * sizeof(float));
    act_inplace(s.act, y, n);
  }

  // ---- preprocessing -----------------------------------------------------------------------

  // Vectorised along each row; every value goes through the same three IEEE operations as in the
  // reference (no FMA: this file is built with -ffp-contract=off), so the bits are the same.
  static void preprocess(const Preprocess& p, const uint8_t* raw, float* out) {
    const int64_t oh = int64_t(p.height) + p.pad_top + p.pad_bottom, ow = int64_t(p.width) + p.pad_left + p.pad_right;
    // Without left/right padding the image rows are contiguous in the output too: one run per plane.
    const bool flat = p.pad_left == 0 && p.pad_right == 0;
    for (int64_t c = 0; c < p.channels; ++c) {
      float* plane = out + c * oh * ow;
      const uint8_t* src = raw + c * int64_t(p.height) * p.width;
      const V vs = S::set1(p.scale), vm = S::set1(p.mean[c]), vd = S::set1(p.std[c]);
      for (int64_t y = 0; y < oh; ++y) {
        float* row = plane + y * ow;
        const int64_t sy = y - p.pad_top;
        if (sy < 0 || sy >= p.height) {
          for (int64_t x = 0; x < ow; ++x) row[x] = p.pad_value;
          continue;
        }
        if (flat) {
          if (sy == 0) normalise(src, row, int64_t(p.height) * p.width, vs, vm, vd);
          continue;
        }
        for (int64_t x = 0; x < p.pad_left; ++x) row[x] = p.pad_value;
        for (int64_t x = p.pad_left + p.width; x < ow; ++x) row[x] = p.pad_value;
        normalise(src + sy * p.width, row + p.pad_left, p.width, vs, vm, vd);
      }
    }
  }
  // n pixels, whole vectors and then the tail through a zero-padded W-byte buffer (same operations).
  static void normalise(const uint8_t* src, float* dst, int64_t n, V vs, V vm, V vd) {
    int64_t x = 0;
    for (; x + W <= n; x += W) S::store(dst + x, S::div(S::sub(S::mul(S::load_u8(src + x), vs), vm), vd));
    if (x < n) {
      uint8_t tail[W < 16 ? 16 : W] = {};
      std::memcpy(tail, src + x, size_t(n - x));
      store_part(dst + x, S::div(S::sub(S::mul(S::load_u8(tail), vs), vm), vd), int(n - x));
    }
  }

  // W rows of `elements` floats (one image each) to the tile layout [elements][W]: W x W blocks
  // transposed in registers, the last elements one by one.
  static void to_lanes(const float* rows, int64_t elements, float* tile) {
    int64_t e = 0;
    for (; e + W <= elements; e += W) {
      V r[W];
      for (int i = 0; i < W; ++i) r[i] = S::load(rows + i * elements + e);
      S::transpose(r);
      for (int j = 0; j < W; ++j) S::store(tile + (e + j) * W, r[j]);
    }
    for (; e < elements; ++e)
      for (int i = 0; i < W; ++i) tile[e * W + i] = rows[i * elements + e];
  }

  // ---- whole network ------------------------------------------------------------------------

  static void run_tile(const Program& prog, float* arena, float* scratch) {
    for (int i = 0; i < prog.count; ++i) {
      const KStep& s = prog.steps[i];
      switch (s.op) {
        case KOp::Conv: conv_tile(s, arena, scratch); break;
        case KOp::AvgPool: pool_tile<false>(s, arena + s.in0 * W, arena + s.out * W); break;
        case KOp::MaxPool: pool_tile<true>(s, arena + s.in0 * W, arena + s.out * W); break;
        case KOp::Act: elementwise(s, arena, W); break;
        case KOp::Dense: dense_tile(s, arena); break;
        case KOp::Softmax: softmax_tile(s, arena); break;
        case KOp::Add: add(s, arena, W); break;
        case KOp::ScaleShift: scale_shift(s, arena, W); break;
        case KOp::Copy: copy(s, arena, W); break;
      }
    }
  }

  static void run_single(const Program& prog, float* arena, float* scratch) {
    run_steps_single(prog, 0, prog.count, arena, scratch);
  }

  // Image groups: the steps between two dense layers run image by image (each image's activations
  // stay in cache while it goes through them), each dense layer for the whole group at once (its
  // weights read once per group instead of once per image).
  static void run_group(const Program& prog, float* arena, int64_t stride, int count, float* scratch) {
    if (count == 1) return run_single(prog, arena, scratch);
    for (int i = 0; i < prog.count;) {
      if (prog.steps[i].op == KOp::Dense) {
        dense_group(prog.steps[i], arena, stride, count);
        ++i;
        continue;
      }
      int j = i;
      while (j < prog.count && prog.steps[j].op != KOp::Dense) ++j;
      for (int g = 0; g < count; ++g) run_steps_single(prog, i, j, arena + int64_t(g) * stride, scratch);
      i = j;
    }
  }

  static void run_steps_single(const Program& prog, int first, int end, float* arena, float* scratch) {
    for (int i = first; i < end; ++i) {
      const KStep& s = prog.steps[i];
      switch (s.op) {
        case KOp::Conv: conv_single(s, arena, scratch); break;
        case KOp::AvgPool: pool_single<false>(s, arena + s.in0, arena + s.out); break;
        case KOp::MaxPool: pool_single<true>(s, arena + s.in0, arena + s.out); break;
        case KOp::Act: elementwise(s, arena, 1); break;
        case KOp::Dense: dense_single(s, arena); break;
        case KOp::Softmax: softmax_single(s, arena); break;
        case KOp::Add: add(s, arena, 1); break;
        case KOp::ScaleShift: scale_shift(s, arena, 1); break;
        case KOp::Copy: copy(s, arena, 1); break;
      }
    }
  }
};

}  // namespace
}  // namespace engine::cpu::ENGINE_CPU_KERNEL_NS

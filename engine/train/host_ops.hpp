#pragma once
// Forward and backward of every format v1 op on the host, written once over the scalar type T:
// the reference backend instantiates them with double (the oracle: float64 throughout, so its
// gradients can be checked against finite differences), the cpu backend with float.
//
// Every sum has one fixed order, written out below, and every output element is computed by one
// thread; the callers (host_trainer.hpp) split work only over independent outputs (samples for
// activations and their gradients, output channels or units for parameter gradients). So results
// depend on neither the thread count nor the schedule. Inner loops run along contiguous rows and
// are axpy-shaped (y[j] += a * x[j]), which compilers vectorise without reordering a sum.
// Translation units including this file are compiled with -ffp-contract=off: no fused
// multiply-add the source does not write, so float results do not change with -march.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "formats/model.hpp"

// Everything is in an unnamed namespace: each translation unit (one per scalar type and instruction
// set) gets its own copy, so code built with -mavx2 can never be picked by the linker for another.
namespace engine::train {
namespace {

struct Dims {
  int c = 1, h = 1, w = 1;
  int64_t plane() const { return int64_t(h) * w; }
  int64_t size() const { return int64_t(c) * h * w; }
};

// Output positions o with 0 <= o * stride + offset < size, as [first, last).
struct Range {
  int first, last;
};
inline Range inside(int64_t offset, int64_t stride, int64_t size, int outputs) {
  const int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t span = size - 1 - offset;
  const int64_t last = span < 0 ? 0 : std::min<int64_t>(outputs, span / stride + 1);
  return {int(std::min(first, last)), int(last)};
}

// ---- conv2d: y[o,i,j] = b[o] + sum over (c, p, q) of x[c, i*sh+p-t, j*sw+q-l] * w[o,c,p,q] --------
// Through im2col, one sample at a time: col[k][pos], k = (c, p, q) (the weight's inner layout),
// pos = (i, j), zero where the tap falls in the padding. Every loop below is then elementwise
// over pos (contiguous, P = out.h * out.w long) or over a fixed block of lanes, so it vectorises
// without reordering any sum, and output channels come in blocks of kConvBlock sharing each load.

inline constexpr int kConvBlock = 4;
inline constexpr int kLanes = 16;  // partial sums per weight in the parameter gradient

struct ConvShape {
  Dims in, out;
  int64_t taps = 0;       // K = in.c * kh * kw
  int64_t positions = 0;  // P = out.h * out.w
};

inline ConvShape conv_shape(Dims in, const formats::Window2D& win, Dims out) {
  return ConvShape{in, out, int64_t(in.c) * win.kernel_h * win.kernel_w, out.plane()};
}

template <class T>
void im2col(const T* x, const ConvShape& s, const formats::Window2D& win, T* col) {
  const int kh = win.kernel_h, kw = win.kernel_w, sh = win.stride_h, sw = win.stride_w;
  for (int c = 0; c < s.in.c; ++c)
    for (int p = 0; p < kh; ++p) {
      const Range rows = inside(p - win.pad_top, sh, s.in.h, s.out.h);
      for (int q = 0; q < kw; ++q) {
        const Range cols = inside(q - win.pad_left, sw, s.in.w, s.out.w);
        const int shift = q - win.pad_left;
        T* row_k = col + ((int64_t(c) * kh + p) * kw + q) * s.positions;
        std::fill(row_k, row_k + s.positions, T(0));
        for (int i = rows.first; i < rows.last; ++i) {
          const T* x_row = x + int64_t(c) * s.in.plane() + (int64_t(i) * sh + p - win.pad_top) * s.in.w;
          T* out = row_k + int64_t(i) * s.out.w;
          for (int j = cols.first; j < cols.last; ++j) out[j] = x_row[int64_t(j) * sw + shift];
        }
      }
    }
}

// y[o][pos] = b[o], then + w[o][k] * col[k][pos] for k ascending (padded taps add exact zeros).
template <class T>
void conv2d_forward(const T* col, const ConvShape& s, const T* w, const T* b, T* y) {
  const int64_t K = s.taps, P = s.positions;
  for (int o0 = 0; o0 < s.out.c; o0 += kConvBlock) {
    const int o1 = std::min(s.out.c, o0 + kConvBlock);
    for (int o = o0; o < o1; ++o) std::fill(y + o * P, y + (o + 1) * P, b ? b[o] : T(0));
    for (int64_t k = 0; k < K; ++k) {
      const T* c_k = col + k * P;
      for (int o = o0; o < o1; ++o) {
        const T wv = w[o * K + k];
        T* y_o = y + o * P;
        for (int64_t i = 0; i < P; ++i) y_o[i] += wv * c_k[i];
      }
    }
  }
}

// dcol[k][pos] = sum over o (ascending) of w[o][k] * dy[o][pos]. Overwrites.
template <class T>
void conv2d_backward_col(const T* dy, const ConvShape& s, const T* w, T* dcol) {
  const int64_t K = s.taps, P = s.positions;
  std::fill(dcol, dcol + K * P, T(0));
  for (int o = 0; o < s.out.c; ++o) {
    const T* dy_o = dy + o * P;
    for (int64_t k = 0; k < K; ++k) {
      const T wv = w[o * K + k];
      T* d_k = dcol + k * P;
      for (int64_t i = 0; i < P; ++i) d_k[i] += wv * dy_o[i];
    }
  }
}

// dx += col2im(dcol): each input element gets its taps in (c, p, q) order, then positions.
template <class T>
void col2im_add(const T* dcol, const ConvShape& s, const formats::Window2D& win, T* dx) {
  const int kh = win.kernel_h, kw = win.kernel_w, sh = win.stride_h, sw = win.stride_w;
  for (int c = 0; c < s.in.c; ++c)
    for (int p = 0; p < kh; ++p) {
      const Range rows = inside(p - win.pad_top, sh, s.in.h, s.out.h);
      for (int q = 0; q < kw; ++q) {
        const Range cols = inside(q - win.pad_left, sw, s.in.w, s.out.w);
        const int shift = q - win.pad_left;
        const T* d_k = dcol + ((int64_t(c) * kh + p) * kw + q) * s.positions;
        for (int i = rows.first; i < rows.last; ++i) {
          T* dx_row = dx + int64_t(c) * s.in.plane() + (int64_t(i) * sh + p - win.pad_top) * s.in.w;
          const T* d = d_k + int64_t(i) * s.out.w;
          if (sw == 1) {
            for (int j = cols.first; j < cols.last; ++j) dx_row[j + shift] += d[j];
          } else {
            for (int j = cols.first; j < cols.last; ++j) dx_row[int64_t(j) * sw + shift] += d[j];
          }
        }
      }
    }
}

// Parameter gradient, one sample's share for output channels [o0, o1): lanes[o][k][l] +=
// dy[o][pos] * col[k][pos] for pos = l, l + kLanes, ... (ascending); bias lanes (row K of each
// o) += dy[o][pos]. conv2d_reduce_lanes then sums each weight's lanes in l order. Called for
// samples in ascending order, this fixes every sum's order.
template <class T>
void conv2d_backward_params_add(const T* col, const T* dy, const ConvShape& s, int o0, int o1, T* lanes) {
  const int64_t K = s.taps, P = s.positions, full = P / kLanes * kLanes;
  for (int o = o0; o < o1; ++o) {
    const T* dy_o = dy + o * P;
    T* lo = lanes + int64_t(o - o0) * (K + 1) * kLanes;
    for (int64_t k = 0; k < K; ++k) {
      const T* c_k = col + k * P;
      // A local copy of the lanes: the compiler cannot prove `acc` apart from the inputs, and
      // would otherwise keep every lane in memory, one scalar at a time.
      T a[kLanes];
      std::copy_n(lo + k * kLanes, kLanes, a);
      for (int64_t i = 0; i < full; i += kLanes)
        for (int l = 0; l < kLanes; ++l) a[l] += dy_o[i + l] * c_k[i + l];
      for (int64_t i = full; i < P; ++i) a[i - full] += dy_o[i] * c_k[i];
      std::copy_n(a, kLanes, lo + k * kLanes);
    }
    T* acc = lo + K * kLanes;
    for (int64_t i = 0; i < full; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += dy_o[i + l];
    for (int64_t i = full; i < P; ++i) acc[i - full] += dy_o[i];
  }
}

template <class T>
void conv2d_reduce_lanes(const T* lanes, const ConvShape& s, int o0, int o1, T* dw, T* db) {
  const int64_t K = s.taps;
  for (int o = o0; o < o1; ++o)
    for (int64_t k = 0; k <= K; ++k) {
      const T* acc = lanes + (int64_t(o - o0) * (K + 1) + k) * kLanes;
      T sum = 0;
      for (int l = 0; l < kLanes; ++l) sum += acc[l];
      if (k < K) dw[o * K + k] = sum;
      else if (db) db[o] = sum;
    }
}

// ---- pooling (one sample) ------------------------------------------------------------------------

// Calls f(c, output index, input index) for each valid window position, in row-major window order.
template <class F>
void for_each_window(Dims in, const formats::Window2D& win, Dims out, int c, int i, int j, F&& f) {
  const int64_t top = int64_t(i) * win.stride_h - win.pad_top, left = int64_t(j) * win.stride_w - win.pad_left;
  const int64_t p0 = std::max<int64_t>(0, -top), p1 = std::min<int64_t>(win.kernel_h, in.h - top);
  const int64_t q0 = std::max<int64_t>(0, -left), q1 = std::min<int64_t>(win.kernel_w, in.w - left);
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t q = q0; q < q1; ++q) f(c * in.plane() + (top + p) * in.w + left + q);
  (void)out;
}

template <class T>
T avgpool_divisor(Dims in, const formats::Window2D& win, bool count_include_pad, int i, int j) {
  if (count_include_pad) return T(double(win.kernel_h) * double(win.kernel_w));
  const int64_t top = int64_t(i) * win.stride_h - win.pad_top, left = int64_t(j) * win.stride_w - win.pad_left;
  const int64_t rows = std::min<int64_t>(win.kernel_h, in.h - top) - std::max<int64_t>(0, -top);
  const int64_t cols = std::min<int64_t>(win.kernel_w, in.w - left) - std::max<int64_t>(0, -left);
  return T(double(std::max<int64_t>(0, rows) * std::max<int64_t>(0, cols)));
}

// Sum in window order, then divided by the divisor (padded positions count as zeros, or not).
template <class T>
void avgpool_forward(const T* x, Dims in, const formats::Window2D& win, bool cip, Dims out, T* y) {
  for (int c = 0; c < out.c; ++c)
    for (int i = 0; i < out.h; ++i)
      for (int j = 0; j < out.w; ++j) {
        T sum = 0;
        for_each_window(in, win, out, c, i, j, [&](int64_t k) { sum += x[k]; });
        const T d = avgpool_divisor<T>(in, win, cip, i, j);
        y[(int64_t(c) * out.h + i) * out.w + j] = d > 0 ? sum / d : T(0);
      }
}

template <class T>
void avgpool_backward(const T* dy, Dims in, const formats::Window2D& win, bool cip, Dims out, T* dx) {
  for (int c = 0; c < out.c; ++c)
    for (int i = 0; i < out.h; ++i)
      for (int j = 0; j < out.w; ++j) {
        const T d = avgpool_divisor<T>(in, win, cip, i, j);
        if (!(d > 0)) continue;
        const T g = dy[(int64_t(c) * out.h + i) * out.w + j] / d;
        for_each_window(in, win, out, c, i, j, [&](int64_t k) { dx[k] += g; });
      }
}

// The window's first maximum in row-major order (a later equal value does not replace it), as
// PyTorch's CPU max_pool2d picks it; padded positions never win. -1 when the window is empty.
template <class T>
int64_t maxpool_argmax(const T* x, Dims in, const formats::Window2D& win, Dims out, int c, int i, int j) {
  int64_t best = -1;
  T m = -std::numeric_limits<T>::infinity();
  for_each_window(in, win, out, c, i, j, [&](int64_t k) {
    if (best < 0 || x[k] > m) {
      m = x[k];
      best = k;
    }
  });
  return best;
}

template <class T>
void maxpool_forward(const T* x, Dims in, const formats::Window2D& win, Dims out, T* y) {
  for (int c = 0; c < out.c; ++c)
    for (int i = 0; i < out.h; ++i)
      for (int j = 0; j < out.w; ++j) {
        const int64_t k = maxpool_argmax(x, in, win, out, c, i, j);
        y[(int64_t(c) * out.h + i) * out.w + j] = k >= 0 ? x[k] : -std::numeric_limits<T>::infinity();
      }
}

// The whole gradient of an output goes to its window's first maximum.
template <class T>
void maxpool_backward(const T* x, const T* dy, Dims in, const formats::Window2D& win, Dims out, T* dx) {
  for (int c = 0; c < out.c; ++c)
    for (int i = 0; i < out.h; ++i)
      for (int j = 0; j < out.w; ++j) {
        const int64_t k = maxpool_argmax(x, in, win, out, c, i, j);
        if (k >= 0) dx[k] += dy[(int64_t(c) * out.h + i) * out.w + j];
      }
}

// ---- dense: y[s,u] = b[u] + sum over k (ascending) of x[s,k] * w[u,k] -----------------------------

inline constexpr int kDenseBlock = 4;  // samples (forward, dx) or units (dw) sharing one pass

// Samples [s0, s1) of the batch; wt is w transposed, [k][units], so the inner loop runs along units.
template <class T>
void dense_forward(const T* x, int64_t k, const T* wt, const T* b, int units, int s0, int s1, T* y) {
  for (int s = s0; s < s1; s += kDenseBlock) {
    const int e = std::min(s1, s + kDenseBlock);
    for (int r = s; r < e; ++r)
      for (int u = 0; u < units; ++u) y[int64_t(r) * units + u] = b ? b[u] : T(0);
    for (int64_t i = 0; i < k; ++i) {
      const T* w_i = wt + i * units;
      for (int r = s; r < e; ++r) {
        const T xv = x[int64_t(r) * k + i];
        T* y_r = y + int64_t(r) * units;
        for (int u = 0; u < units; ++u) y_r[u] += xv * w_i[u];
      }
    }
  }
}

// dx[s,k] += sum over u (ascending) of dy[s,u] * w[u,k], for samples [s0, s1). Zero dy terms are
// skipped (after relu most are): adding 0 * w changes nothing but the sign of a zero.
template <class T>
void dense_backward_input(const T* dy, int64_t k, const T* w, int units, int s0, int s1, T* dx) {
  for (int s = s0; s < s1; ++s) {
    T* dx_s = dx + int64_t(s) * k;
    const T* dy_s = dy + int64_t(s) * units;
    for (int u = 0; u < units; ++u) {
      const T g = dy_s[u];
      if (g == T(0)) continue;
      const T* w_u = w + int64_t(u) * k;
      for (int64_t i = 0; i < k; ++i) dx_s[i] += g * w_u[i];
    }
  }
}

// Units [u0, u1): dw[u,k] = sum over samples (ascending) of dy[s,u] * x[s,k]; db[u] likewise (may be
// null). Overwrites.
template <class T>
void dense_backward_params(const T* x, int64_t k, const T* dy, int units, int n, int u0, int u1, T* dw, T* db) {
  for (int u = u0; u < u1; u += kDenseBlock) {
    const int e = std::min(u1, u + kDenseBlock);
    std::fill(dw + int64_t(u) * k, dw + int64_t(e) * k, T(0));
    for (int s = 0; s < n; ++s) {
      const T* x_s = x + int64_t(s) * k;
      for (int r = u; r < e; ++r) {
        const T g = dy[int64_t(s) * units + r];
        if (g == T(0)) continue;
        T* dw_r = dw + int64_t(r) * k;
        for (int64_t i = 0; i < k; ++i) dw_r[i] += g * x_s[i];
      }
    }
    if (db)
      for (int r = u; r < e; ++r) {
        T acc = 0;
        for (int s = 0; s < n; ++s) acc += dy[int64_t(s) * units + r];
        db[r] = acc;
      }
  }
}

// ---- elementwise, softmax, scale_shift -----------------------------------------------------------

// PyTorch's derivatives: relu' = 1 where x > 0 (0 at 0), tanh' = 1 - y^2, sigmoid' = (1 - y) * y.
template <class T>
void activation_forward(formats::OpType op, const T* x, int64_t n, T* y) {
  for (int64_t i = 0; i < n; ++i) {
    if (op == formats::OpType::Relu) y[i] = x[i] > T(0) ? x[i] : T(0);
    else if (op == formats::OpType::Tanh) y[i] = std::tanh(x[i]);
    else y[i] = T(1) / (T(1) + std::exp(-x[i]));
  }
}

template <class T>
void activation_backward(formats::OpType op, const T* x, const T* y, const T* dy, int64_t n, T* dx) {
  for (int64_t i = 0; i < n; ++i) {
    if (op == formats::OpType::Relu) dx[i] += x[i] > T(0) ? dy[i] : T(0);
    else if (op == formats::OpType::Tanh) dx[i] += dy[i] * (T(1) - y[i] * y[i]);
    else dx[i] += dy[i] * (T(1) - y[i]) * y[i];
  }
}

// One sample: y = exp(x - max) / sum, the sum in index order.
template <class T>
void softmax_forward(const T* x, int64_t k, T* y) {
  const T m = *std::max_element(x, x + k);
  T sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    y[i] = std::exp(x[i] - m);
    sum += y[i];
  }
  for (int64_t i = 0; i < k; ++i) y[i] = y[i] / sum;
}

// One sample: dx_i += y_i * (dy_i - sum_j dy_j * y_j).
template <class T>
void softmax_backward(const T* y, const T* dy, int64_t k, T* dx) {
  T dot = 0;
  for (int64_t i = 0; i < k; ++i) dot += dy[i] * y[i];
  for (int64_t i = 0; i < k; ++i) dx[i] += y[i] * (dy[i] - dot);
}

// Softmax + cross-entropy of one sample on its logits z: writes the probabilities to p and
// dz = (p - onehot(label)) * inv_n, returns -log p[label] = logsumexp(z) - z[label].
template <class T>
T softmax_cross_entropy(const T* z, int64_t k, int label, T inv_n, T* p, T* dz) {
  const T m = *std::max_element(z, z + k);
  T sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += std::exp(z[i] - m);
  const T log_sum = std::log(sum);
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::exp(z[i] - m) / sum;
    if (dz) dz[i] = (p[i] - (i == label ? T(1) : T(0))) * inv_n;
  }
  return (m + log_sum) - z[label];
}

// One sample, channels of `inner` elements each: y = x * scale[c] + shift[c].
template <class T>
void scale_shift_forward(const T* x, int64_t channels, int64_t inner, const T* scale, const T* shift, T* y) {
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < inner; ++i) y[c * inner + i] = x[c * inner + i] * scale[c] + shift[c];
}

template <class T>
void scale_shift_backward_input(const T* dy, int64_t channels, int64_t inner, const T* scale, T* dx) {
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < inner; ++i) dx[c * inner + i] += dy[c * inner + i] * scale[c];
}

// Channel c over n samples: dscale[c] = sum (samples, then elements) of dy * x; dshift[c] of dy.
template <class T>
void scale_shift_backward_params(const T* x, const T* dy, int64_t channels, int64_t inner, int n, int64_t c,
                                 T* dscale, T* dshift) {
  T a = 0, b = 0;
  for (int s = 0; s < n; ++s) {
    const int64_t base = int64_t(s) * channels * inner + c * inner;
    for (int64_t i = 0; i < inner; ++i) {
      a += dy[base + i] * x[base + i];
      b += dy[base + i];
    }
  }
  dscale[c] = a;
  dshift[c] = b;
}

}  // namespace
}  // namespace engine::train

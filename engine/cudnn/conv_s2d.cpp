// conv2d with few output channels as a space-to-depth convolution (the cudnn backend's design,
// docs/design/).
//
// Why: cuDNN's fp32 implicit-GEMM kernels tile the output channels by 32 or more, so a convolution
// with few output channels (LeNet's c1: 1 -> 6) leaves most of each tile idle. Folding each 2x2 block
// of pixels into channels turns a stride-1 KhxKw convolution of [C, H, W] into a (Kh/2+1)x(Kw/2+1)
// convolution of [4C, H/2, W/2] with 4K output channels, one per (channel, row parity, column parity)
// of the output: 4x the useful tile width for 1.44x the multiply-adds (the zero taps of the
// rearranged kernel; x * 0 adds exactly 0).
//
//   input    xs[n, 4c + 2r + s, a, b] = x[n, c, 2a + r, 2b + s]                   (a strided copy)
//   weights  W2[4o + 2p + q, 4c + 2r + s, u, v] = w[o, c, 2u + r - p, 2v + s - q]  (0 outside the kernel)
//   bias     b2[4o + 2p + q] = b[o]
//   conv     ys = conv(xs, W2) + b2, padding pad/2      (an ordinary ConvStep: algorithm choice, fusion)
//   output   y[n, o, 2a + p, 2b + q] = act(ys[n, 4o + 2p + q, a, b])
//            (cudnnActivationForward with strided 5-D descriptors when an activation follows,
//             the strided copy otherwise: either way one pass, as the unfused activation's)
// (n, c) are one dimension in both layouts, so every rearrangement is a 5-D strided copy.
//
// Where: stride 1, odd kernel sizes, symmetric even padding, even input height and width (so every
// 2x2 block is whole), at most kMaxOutChannels output channels, and executables planned for at least
// kMinBatch images: the two copies are two more launches per convolution, which cost more than the
// idle tile width saves on small batches. CudnnOptions::space_to_depth turns it off, or on whatever
// the batch. Each output is a dot product over the same taps as the direct convolution plus zero
// taps, in cuDNN's order: fp32 parity with the reference holds as for any cuDNN algorithm.
#include <fmt/format.h>

#include <stdexcept>

#include "engine/cudnn/steps.hpp"

namespace engine::cudnn {
namespace {

constexpr int kMaxOutChannels = 16;
constexpr int kMinBatch = 256;

// A 5-D tensor descriptor of the storage's type from dims and strides.
void set_5d(cudnnTensorDescriptor_t desc, const Storage& s, const int (&dims)[5], const int (&strides)[5],
            const std::string& label) {
  CUDNN_CHECK_CTX(cudnnSetTensorNdDescriptor(desc, s.dtype, 5, dims, strides), label);
}

class SpaceToDepthConvStep final : public Step {
 public:
  SpaceToDepthConvStep(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape, const void* x,
                       void* y, std::optional<OpType> activation, const std::string& activation_name)
      : Step(node_label(node)),
        storage_(ctx.storage),
        x_(x),
        y_(y),
        activation_(activation),
        activation_name_(activation_name) {
    c_ = int(input_shape.at(0));
    h_ = int(input_shape.at(1));
    w_ = int(input_shape.at(2));
    k_ = node.out_channels;
    oh_ = int(node.output_shape.at(1));
    ow_ = int(node.output_shape.at(2));
    const auto& win = node.window;
    kh_ = win.kernel_h / 2 + 1;
    kw_ = win.kernel_w / 2 + 1;

    // The rearranged node: same name (labels, algorithm cache key by shape), new shapes and tensors.
    formats::Node s2d;
    s2d.name = node.name;
    s2d.op = OpType::Conv2D;
    s2d.inputs = node.inputs;
    s2d.window = formats::Window2D{kh_, kw_, 1, 1, win.pad_top / 2, win.pad_bottom / 2, win.pad_left / 2,
                                   win.pad_right / 2};
    s2d.out_channels = 4 * k_;
    s2d.output_shape = {4 * k_, oh_ / 2, ow_ / 2};
    formats::Tensor w2;
    w2.name = node.weight->name + " (space-to-depth)";
    w2.shape = {4 * k_, 4 * c_, kh_, kw_};
    w2.values.assign(size_t(16) * k_ * c_ * kh_ * kw_, 0.0f);
    const auto& w = node.weight->values;
    for (int o = 0; o < k_; ++o)
      for (int p = 0; p < 2; ++p)
        for (int q = 0; q < 2; ++q)
          for (int c = 0; c < c_; ++c)
            for (int r = 0; r < 2; ++r)
              for (int s = 0; s < 2; ++s)
                for (int u = 0; u < kh_; ++u)
                  for (int v = 0; v < kw_; ++v) {
                    const int i = 2 * u + r - p, j = 2 * v + s - q;
                    if (i < 0 || i >= win.kernel_h || j < 0 || j >= win.kernel_w) continue;
                    const size_t to = ((size_t(4 * o + 2 * p + q) * (4 * c_) + (4 * c + 2 * r + s)) * kh_ + u) * kw_ + v;
                    w2.values[to] = w[((size_t(o) * c_ + c) * win.kernel_h + i) * win.kernel_w + j];
                  }
    s2d.weight = std::move(w2);
    if (node.bias) {
      formats::Tensor b2;
      b2.name = node.bias->name + " (space-to-depth)";
      b2.shape = {4 * k_};
      for (int o = 0; o < k_; ++o)
        for (int i = 0; i < 4; ++i) b2.values.push_back(node.bias->values[size_t(o)]);
      s2d.bias = std::move(b2);
    }

    const size_t in_sample = size_t(c_) * h_ * w_, out_sample = size_t(k_) * oh_ * ow_;
    xs_ = gpu::DeviceBuffer<unsigned char>(size_t(ctx.max_batch) * in_sample * storage_.bytes(),
                                           label_ + ": space-to-depth input");
    ys_ = gpu::DeviceBuffer<unsigned char>(size_t(ctx.max_batch) * out_sample * storage_.bytes(),
                                           label_ + ": space-to-depth output");
    // Poisoned like the arena (0xFF bytes: NaN): cuDNN's TF32 engines read the fused convolution's
    // z operand (= ys) even with alpha2 = 0, and never-written memory is an initcheck error.
    CUDA_CHECK_CTX(cudaMemsetAsync(xs_.data(), 0xFF, xs_.bytes(), ctx.stream), label_);
    CUDA_CHECK_CTX(cudaMemsetAsync(ys_.data(), 0xFF, ys_.bytes(), ctx.stream), label_);
    conv_ = make_conv_step(ctx, s2d, Shape{4 * c_, h_ / 2, w_ / 2}, xs_.data(), ys_.data(), ConvFusion{}, "");
    if (activation_) {
      cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
      if (*activation_ == OpType::Tanh) mode = CUDNN_ACTIVATION_TANH;
      if (*activation_ == OpType::Sigmoid) mode = CUDNN_ACTIVATION_SIGMOID;
      CUDNN_CHECK_CTX(cudnnSetActivationDescriptor(act_desc_, mode, CUDNN_PROPAGATE_NAN, 0.0), label_);
    }
    chunks_.limit(int64_t(std::max(in_sample, out_sample)));
    set_batch(ctx.max_batch);
  }

  void set_batch(int n) override {
    conv_->set_batch(n);
    chunks_.set(n);
    if (chunks_.has_full()) describe(chunks_.size(), in_full_, xs_full_, ys_full_, out_full_);
    if (chunks_.tail() > 0) describe(chunks_.tail(), in_tail_, xs_tail_, ys_tail_, out_tail_);
  }

  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    const size_t in_sample = size_t(c_) * h_ * w_, out_sample = size_t(k_) * oh_ * ow_;
    chunks_.for_each([&](size_t first, bool tail) {
      copy(ctx, tail, true, storage_.at(x_, first * in_sample), storage_.at(xs_.data(), first * in_sample));
    });
    conv_->enqueue(ctx);
    chunks_.for_each([&](size_t first, bool tail) {
      const void* from = storage_.at(ys_.data(), first * out_sample);
      void* to = storage_.at(y_, first * out_sample);
      if (activation_)
        CUDNN_CHECK_CTX(cudnnActivationForward(ctx.cudnn, act_desc_, &one, tail ? ys_tail_ : ys_full_, from, &zero,
                                               tail ? out_tail_ : out_full_, to),
                        label_ + ": depth-to-space with '" + activation_name_ + "'");
      else
        copy(ctx, tail, false, from, to);
    });
  }

  size_t workspace_bytes() const override { return conv_->workspace_bytes(); }

  std::string summary() const override {
    return fmt::format("{}: space-to-depth 2x2 ([{}, {}, {}] -> [{}, {}, {}], {}x{} kernel, {} output channels; "
                       "copies by cudnnAddTensor){}; {}",
                       label_, c_, h_, w_, 4 * c_, h_ / 2, w_ / 2, kh_, kw_, 4 * k_,
                       activation_ ? fmt::format(", '{}' fused into the depth-to-space", activation_name_) : "",
                       conv_->summary());
  }

 private:
  // The input's space-to-depth (input = true) or the output's depth-to-space, one chunk.
  void copy(const RunContext& ctx, bool tail, bool input, const void* from, void* to) {
    const float one = 1.0f, zero = 0.0f;
    const std::string what = label_ + (input ? ": space-to-depth of the input" : ": depth-to-space of the output");
    cudnnTensorDescriptor_t a = input ? (tail ? in_tail_ : in_full_) : (tail ? ys_tail_ : ys_full_);
    cudnnTensorDescriptor_t b = input ? (tail ? xs_tail_ : xs_full_) : (tail ? out_tail_ : out_full_);
    // cudnnAddTensor with beta = 0 (the destination is not read) copies these strided views at
    // memory speed, where cudnnTransformTensor, the obvious call, is much slower on them.
    CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, &one, a, from, &zero, b, to), what);
  }

  // Descriptors of one chunk of n samples; (n, channel) merged into the first dimension.
  // The channel of pixel (2a + r, 2b + s), channel c, in the folded tensor is 4c + 2r + s, in either
  // layout (output: 4o + 2p + q).
  void describe(int n, TensorDesc& in, TensorDesc& xs, TensorDesc& ys, TensorDesc& out) {
    const int h2 = h_ / 2, w2 = w_ / 2, oh2 = oh_ / 2, ow2 = ow_ / 2;
    if (!storage_.nhwc()) {
      const int hw = h_ * w_, ohw = oh_ * ow_;
      // [n*c, r, s, a, b]
      set_5d(in, storage_, {n * c_, 2, 2, h2, w2}, {hw, w_, 1, 2 * w_, 2}, label_);
      set_5d(xs, storage_, {n * c_, 2, 2, h2, w2}, {hw, 2 * h2 * w2, h2 * w2, w2, 1}, label_);
      // [n*k, p, q, a, b]
      set_5d(ys, storage_, {n * k_, 2, 2, oh2, ow2}, {ohw, 2 * oh2 * ow2, oh2 * ow2, ow2, 1}, label_);
      set_5d(out, storage_, {n * k_, 2, 2, oh2, ow2}, {ohw, ow_, 1, 2 * ow_, 2}, label_);
      return;
    }
    // NHWC: [n*h2, b, c, r, s] (sample and block row merge: both tensors step 2 * W * C per block row)
    const int row = 2 * w_ * c_;
    set_5d(in, storage_, {n * h2, w2, c_, 2, 2}, {row, 2 * c_, 1, w_ * c_, c_}, label_);
    set_5d(xs, storage_, {n * h2, w2, c_, 2, 2}, {row, 4 * c_, 4, 2, 1}, label_);
    // [n*oh2, b, k, p, q]
    const int orow = 2 * ow_ * k_;
    set_5d(ys, storage_, {n * oh2, ow2, k_, 2, 2}, {orow, 4 * k_, 4, 2, 1}, label_);
    set_5d(out, storage_, {n * oh2, ow2, k_, 2, 2}, {orow, 2 * k_, 1, ow_ * k_, k_}, label_);
  }

  Storage storage_;
  const void* x_;
  void* y_;
  std::optional<OpType> activation_;
  std::string activation_name_;
  int c_ = 0, h_ = 0, w_ = 0, k_ = 0, oh_ = 0, ow_ = 0, kh_ = 0, kw_ = 0;
  gpu::DeviceBuffer<unsigned char> xs_, ys_;
  std::unique_ptr<Step> conv_;
  ActivationDesc act_desc_;
  BatchChunks chunks_;
  TensorDesc in_full_, xs_full_, ys_full_, out_full_, in_tail_, xs_tail_, ys_tail_, out_tail_;
};

}  // namespace

std::optional<std::string> space_to_depth_refusal(const BuildContext& ctx, const formats::Node& node,
                                                  const Shape& input_shape) {
  using Mode = CudnnOptions::SpaceToDepth;
  const Mode mode = ctx.cudnn_options.space_to_depth;
  if (mode == Mode::Never) return "off (CudnnOptions::space_to_depth)";
  if (mode == Mode::Auto && ctx.max_batch < kMinBatch)
    return fmt::format("planned for {} images (space-to-depth from {} on)", ctx.max_batch, kMinBatch);
  const auto& w = node.window;
  if (node.out_channels > kMaxOutChannels)
    return fmt::format("{} output channels fill cuDNN's tiles (space-to-depth only below {})", node.out_channels,
                       kMaxOutChannels + 1);
  if (w.stride_h != 1 || w.stride_w != 1) return "stride is not 1";
  if (w.kernel_h % 2 == 0 || w.kernel_w % 2 == 0) return "even kernel size";
  if (w.pad_top != w.pad_bottom || w.pad_left != w.pad_right || w.pad_top % 2 || w.pad_left % 2)
    return "padding not symmetric and even";
  if (input_shape.at(1) % 2 || input_shape.at(2) % 2) return "odd input height or width";
  return std::nullopt;
}

std::unique_ptr<Step> make_space_to_depth_conv_step(const BuildContext& ctx, const formats::Node& node,
                                                    const Shape& input_shape, const void* x, void* y,
                                                    std::optional<OpType> activation,
                                                    const std::string& activation_name) {
  return std::make_unique<SpaceToDepthConvStep>(ctx, node, input_shape, x, y, activation, activation_name);
}

}  // namespace engine::cudnn

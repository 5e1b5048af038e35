// maxpool and avgpool through cudnnPoolingForward.
//
// cuDNN's pooling descriptor takes one padding per dimension, applied on both sides. Symmetric
// padding maps directly: max pooling never picks a padded position, AVERAGE_COUNT_INCLUDE_PADDING /
// EXCLUDE_PADDING divide by kh*kw / by the positions inside the input, as model-format-v1 says.
// Asymmetric padding goes through ExplicitPad (a scratch copy with a -inf border for max, a zero border
// for average with count_include_pad) and padding 0. Average pooling with count_include_pad = false and
// asymmetric padding cannot be expressed that way (the explicit zeros would be counted): unsupported.
#include <fmt/format.h>

#include <limits>
#include <stdexcept>

#include "engine/cudnn/steps.hpp"

namespace engine::cudnn {
namespace {

bool symmetric(const formats::Window2D& w) { return w.pad_top == w.pad_bottom && w.pad_left == w.pad_right; }

class PoolStep final : public Step {
 public:
  PoolStep(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape, const void* x, void* y)
      : Step(node_label(node)), storage_(ctx.storage), x_(x), y_(y) {
    if (auto why = unsupported_reason(node)) throw std::runtime_error(label_ + ": " + *why);
    const auto& w = node.window;
    c_ = int(input_shape.at(0));
    in_h_ = int(input_shape.at(1));
    in_w_ = int(input_shape.at(2));
    oh_ = int(node.output_shape.at(1));
    ow_ = int(node.output_shape.at(2));
    const bool is_max = node.op == OpType::MaxPool;
    mode_ = is_max ? CUDNN_POOLING_MAX
                   : (node.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                             : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
    int pad_h = w.pad_top, pad_w = w.pad_left;
    if (!symmetric(w)) {
      const float border = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
      pad_.emplace(ctx, label_, c_, in_h_, in_w_, w, border, x);
      x_ = pad_->padded();
      in_h_ = pad_->padded_height();
      in_w_ = pad_->padded_width();
      pad_h = pad_w = 0;
    }
    CUDNN_CHECK_CTX(cudnnSetPooling2dDescriptor(pool_desc_, mode_, CUDNN_PROPAGATE_NAN, w.kernel_h, w.kernel_w,
                                                pad_h, pad_w, w.stride_h, w.stride_w),
                    label_);
    chunks_.limit(int64_t(c_) * std::max(int64_t(in_h_) * in_w_, int64_t(oh_) * ow_));
    set_batch(ctx.max_batch);
    int n = 0, c = 0, oh = 0, ow = 0;
    CUDNN_CHECK_CTX(cudnnGetPooling2dForwardOutputDim(pool_desc_, chunks_.has_full() ? x_full_ : x_tail_, &n, &c,
                                                      &oh, &ow),
                    label_);
    if (c != c_ || oh != oh_ || ow != ow_)
      throw std::runtime_error(fmt::format("{}: cuDNN computes an output of [{}, {}, {}] where the model has "
                                           "[{}, {}, {}]",
                                           label_, c, oh, ow, c_, oh_, ow_));
  }

  void set_batch(int n) override {
    if (pad_) pad_->set_batch(n);
    chunks_.set(n);
    if (chunks_.has_full()) describe(chunks_.size(), x_full_, y_full_);
    if (chunks_.tail() > 0) describe(chunks_.tail(), x_tail_, y_tail_);
  }

  void enqueue(const RunContext& ctx) override {
    if (pad_) pad_->enqueue(ctx);
    const float one = 1.0f, zero = 0.0f;
    const size_t in_sample = size_t(c_) * size_t(in_h_) * size_t(in_w_);
    const size_t out_sample = size_t(c_) * size_t(oh_) * size_t(ow_);
    chunks_.for_each([&](size_t first, bool tail) {
      CUDNN_CHECK_CTX(cudnnPoolingForward(ctx.cudnn, pool_desc_, &one, tail ? x_tail_ : x_full_,
                                          storage_.at(x_, first * in_sample), &zero, tail ? y_tail_ : y_full_,
                                          storage_.at(y_, first * out_sample)),
                      label_);
    });
  }

  std::string summary() const override {
    const char* mode = mode_ == CUDNN_POOLING_MAX                             ? "CUDNN_POOLING_MAX"
                       : mode_ == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING"
                                                                              : "CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING";
    return fmt::format("{}: cudnnPoolingForward {}{}", label_, mode,
                       pad_ ? fmt::format(", asymmetric padding applied explicitly ({} scratch)",
                                          format_bytes(pad_->scratch_bytes()))
                            : std::string());
  }

 private:
  void describe(int n, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y) {
    set_4d(x, storage_, n, c_, in_h_, in_w_, label_);
    set_4d(y, storage_, n, c_, oh_, ow_, label_);
  }

  Storage storage_;
  const void* x_;
  void* y_;
  int c_ = 0, in_h_ = 0, in_w_ = 0, oh_ = 0, ow_ = 0;
  cudnnPoolingMode_t mode_ = CUDNN_POOLING_MAX;
  std::optional<ExplicitPad> pad_;
  PoolingDesc pool_desc_;
  BatchChunks chunks_;
  TensorDesc x_full_, y_full_, x_tail_, y_tail_;
};

}  // namespace

std::optional<std::string> unsupported_reason(const formats::Node& node) {
  if (node.op == OpType::AvgPool && !node.count_include_pad && !symmetric(node.window))
    return fmt::format("avgpool with count_include_pad = false and asymmetric padding [{}, {}, {}, {}]: cuDNN's "
                       "pooling descriptor only takes symmetric padding, and padding explicitly would count the "
                       "padded zeros in the divisor",
                       node.window.pad_top, node.window.pad_bottom, node.window.pad_left, node.window.pad_right);
  return std::nullopt;
}

std::unique_ptr<Step> make_pool_step(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape,
                                     const void* x, void* y) {
  return std::make_unique<PoolStep>(ctx, node, input_shape, x, y);
}

}  // namespace engine::cudnn

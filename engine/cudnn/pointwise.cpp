// relu / tanh / sigmoid (cudnnActivationForward), softmax (cudnnSoftmaxForward, ACCURATE: the row max
// is subtracted before exp, as model-format-v1 says) and add (cudnnOpTensor). Each sees a value as
// [n, elements, 1, 1]: the per-sample shape does not matter to elementwise ops, and softmax runs over
// all elements of a sample (CUDNN_SOFTMAX_MODE_INSTANCE). NaN propagates, so an element some earlier
// step forgot to write still shows up in the output. scale_shift (cudnnOpTensor MUL, then
// cudnnAddTensor, per channel) and concat (cudaMemcpy2DAsync into each input's slice) live here too.
#include <fmt/format.h>

#include <stdexcept>

#include "engine/cudnn/steps.hpp"
#include "engine/gpu/cuda_check.hpp"

namespace engine::cudnn {
namespace {

// [n, elements, 1, 1] described per chunk of the batch (BatchChunks): one descriptor for the full
// chunks, one for the tail.
class ChunkedRows {
 public:
  void set(const Storage& storage, int n, int elements, const std::string& label) {
    storage_ = storage;
    elements_ = elements;
    chunks_.limit(elements);
    chunks_.set(n);
    if (chunks_.has_full()) set_flat(full_, storage, chunks_.size(), elements, 1, 1, label);
    if (chunks_.tail() > 0) set_flat(tail_, storage, chunks_.tail(), elements, 1, 1, label);
  }
  // f(offset of the chunk's first sample in elements, its descriptor)
  template <typename F>
  void for_each(F&& f) const {
    chunks_.for_each([&](size_t first, bool tail) { f(first * size_t(elements_), tail ? tail_.get() : full_.get()); });
  }

 private:
  Storage storage_;
  int elements_ = 0;
  BatchChunks chunks_;
  TensorDesc full_, tail_;
};

class ActivationStep final : public Step {
 public:
  ActivationStep(const BuildContext& ctx, const formats::Node& node, int64_t elements, const void* x, void* y)
      : Step(node_label(node)), storage_(ctx.storage), x_(x), y_(y), elements_(int(elements)) {
    switch (node.op) {
      case OpType::Relu: mode_ = CUDNN_ACTIVATION_RELU; break;
      case OpType::Tanh: mode_ = CUDNN_ACTIVATION_TANH; break;
      case OpType::Sigmoid: mode_ = CUDNN_ACTIVATION_SIGMOID; break;
      default: throw std::logic_error(label_ + ": not an activation");
    }
    CUDNN_CHECK_CTX(cudnnSetActivationDescriptor(act_desc_, mode_, CUDNN_PROPAGATE_NAN, 0.0), label_);
    set_batch(ctx.max_batch);
  }
  void set_batch(int n) override { descs_.set(storage_, n, elements_, label_); }
  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    descs_.for_each([&](size_t offset, cudnnTensorDescriptor_t desc) {
      CUDNN_CHECK_CTX(cudnnActivationForward(ctx.cudnn, act_desc_, &one, desc, storage_.at(x_, offset), &zero, desc,
                                             storage_.at(y_, offset)),
                      label_);
    });
  }
  std::string summary() const override {
    const char* mode = mode_ == CUDNN_ACTIVATION_RELU   ? "CUDNN_ACTIVATION_RELU"
                       : mode_ == CUDNN_ACTIVATION_TANH ? "CUDNN_ACTIVATION_TANH"
                                                        : "CUDNN_ACTIVATION_SIGMOID";
    return fmt::format("{}: cudnnActivationForward {}", label_, mode);
  }

 private:
  Storage storage_;
  const void* x_;
  void* y_;
  int elements_;
  cudnnActivationMode_t mode_ = CUDNN_ACTIVATION_RELU;
  ActivationDesc act_desc_;
  ChunkedRows descs_;
};

class SoftmaxStep final : public Step {
 public:
  SoftmaxStep(const BuildContext& ctx, const formats::Node& node, int64_t elements, const void* x, void* y)
      : Step(node_label(node)), storage_(ctx.storage), x_(x), y_(y), elements_(int(elements)) {
    set_batch(ctx.max_batch);
  }
  void set_batch(int n) override { descs_.set(storage_, n, elements_, label_); }
  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    descs_.for_each([&](size_t offset, cudnnTensorDescriptor_t desc) {
      CUDNN_CHECK_CTX(cudnnSoftmaxForward(ctx.cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc,
                                          storage_.at(x_, offset), &zero, desc, storage_.at(y_, offset)),
                      label_);
    });
  }
  std::string summary() const override {
    return fmt::format("{}: cudnnSoftmaxForward CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE", label_);
  }

 private:
  Storage storage_;
  const void* x_;
  void* y_;
  int elements_;
  ChunkedRows descs_;
};

class AddStep final : public Step {
 public:
  AddStep(const BuildContext& ctx, const formats::Node& node, int64_t elements, const void* a, const void* b, void* y)
      : Step(node_label(node)), storage_(ctx.storage), a_(a), b_(b), y_(y), elements_(int(elements)) {
    CUDNN_CHECK_CTX(cudnnSetOpTensorDescriptor(op_desc_, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN),
                    label_);
    set_batch(ctx.max_batch);
  }
  void set_batch(int n) override { descs_.set(storage_, n, elements_, label_); }
  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    descs_.for_each([&](size_t offset, cudnnTensorDescriptor_t desc) {
      CUDNN_CHECK_CTX(cudnnOpTensor(ctx.cudnn, op_desc_, &one, desc, storage_.at(a_, offset), &one, desc,
                                    storage_.at(b_, offset), &zero, desc, storage_.at(y_, offset)),
                      label_);
    });
  }
  std::string summary() const override { return fmt::format("{}: cudnnOpTensor CUDNN_OP_TENSOR_ADD", label_); }

 private:
  Storage storage_;
  const void* a_;
  const void* b_;
  void* y_;
  int elements_;
  OpTensorDesc op_desc_;
  ChunkedRows descs_;
};

// y = x * scale[c] + shift[c]: cudnnOpTensor (MUL, the scale broadcast from [1, C, 1, 1]) writes
// x * scale, then cudnnAddTensor adds the shift broadcast the same way. Two roundings per element,
// as the cpu backend does it. x is seen as [n, C, inner, 1] (inner = H * W, or 1 for [F] values).
class ScaleShiftStep final : public Step {
 public:
  ScaleShiftStep(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape, const void* x,
                 void* y)
      : Step(node_label(node)), storage_(ctx.storage), x_(x), y_(y) {
    if (input_shape.empty() || !node.weight || !node.bias)
      throw std::logic_error(label_ + ": needs a value of rank >= 1 and scale and shift tensors");
    channels_ = int(input_shape[0]);
    inner_ = int(formats::element_count(input_shape) / input_shape[0]);
    // NHWC storage holds a [C, H, W] value as [H * W, C]: the descriptor says so (channel stride 1).
    nhwc_ = storage_.nhwc_for(input_shape);
    scale_ = upload(node.weight->values, storage_, label_ + " scale");
    shift_ = upload(node.bias->values, storage_, label_ + " shift");
    CUDNN_CHECK_CTX(cudnnSetOpTensorDescriptor(mul_, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN),
                    label_);
    set_flat(per_channel_, storage_, 1, channels_, 1, 1, label_);
    chunks_.limit(int64_t(channels_) * inner_);
    set_batch(ctx.max_batch);
  }
  void set_batch(int n) override {
    chunks_.set(n);
    if (chunks_.has_full()) describe(full_, chunks_.size());
    if (chunks_.tail() > 0) describe(tail_, chunks_.tail());
  }
  void enqueue(const RunContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;
    const size_t per_sample = size_t(channels_) * size_t(inner_);
    chunks_.for_each([&](size_t first, bool tail) {
      const cudnnTensorDescriptor_t desc = tail ? tail_.get() : full_.get();
      const void* x = storage_.at(x_, first * per_sample);
      void* y = storage_.at(y_, first * per_sample);
      CUDNN_CHECK_CTX(cudnnOpTensor(ctx.cudnn, mul_, &one, desc, x, &one, per_channel_, scale_.data(), &zero, desc, y),
                      label_);
      CUDNN_CHECK_CTX(cudnnAddTensor(ctx.cudnn, &one, per_channel_, shift_.data(), &one, desc, y), label_);
    });
  }
  std::string summary() const override {
    return fmt::format("{}: cudnnOpTensor CUDNN_OP_TENSOR_MUL by the scale, then cudnnAddTensor of the shift "
                       "({} channels of {})",
                       label_, channels_, inner_);
  }

 private:
  void describe(cudnnTensorDescriptor_t desc, int n) {
    if (nhwc_)
      set_4d(desc, storage_, n, channels_, inner_, 1, label_);
    else
      set_flat(desc, storage_, n, channels_, inner_, 1, label_);
  }

  Storage storage_;
  bool nhwc_ = false;
  const void* x_;
  void* y_;
  int channels_ = 0, inner_ = 0;
  gpu::DeviceBuffer<unsigned char> scale_, shift_;
  OpTensorDesc mul_;
  TensorDesc per_channel_, full_, tail_;
  BatchChunks chunks_;
};

// One cudaMemcpy2DAsync per input: rows are samples, an input's row (its per-sample elements) goes
// to its slice of the output's row. No arithmetic, so the values are exactly the inputs'.
class ConcatStep final : public Step {
 public:
  ConcatStep(const BuildContext& ctx, const formats::Node& node, std::vector<ConcatInput> inputs,
             int64_t out_elements, void* y)
      : Step(node_label(node)), storage_(ctx.storage), inputs_(std::move(inputs)), out_elements_(out_elements), y_(y) {
    int64_t total = 0;
    for (const ConcatInput& in : inputs_) total += in.elements;
    if (total != out_elements_)
      throw std::logic_error(fmt::format("{}: inputs hold {} floats per sample, the output {}", label_, total,
                                         out_elements_));
    set_batch(ctx.max_batch);
  }
  void set_batch(int n) override { n_ = n; }
  void enqueue(const RunContext& ctx) override {
    // Rows are samples (NCHW: an input's channels are one contiguous run per sample) or pixels (NHWC:
    // one run per pixel of each sample).
    const size_t b = storage_.bytes();
    const int64_t pixels = inputs_.front().pixels;
    const size_t out_row = size_t(out_elements_ / pixels) * b;
    int64_t offset = 0;  // elements into an output row
    for (const ConcatInput& in : inputs_) {
      const size_t row = size_t(in.elements / pixels) * b;
      CUDA_CHECK_CTX(cudaMemcpy2DAsync(storage_.at(y_, size_t(offset)), out_row, in.x, row, row,
                                       size_t(n_) * size_t(pixels), cudaMemcpyDeviceToDevice, ctx.stream),
                     label_);
      offset += in.elements / pixels;
    }
  }
  std::string summary() const override {
    return fmt::format("{}: cudaMemcpy2DAsync x {} (each input into its channel slice)", label_, inputs_.size());
  }

 private:
  Storage storage_;
  std::vector<ConcatInput> inputs_;
  int64_t out_elements_;
  void* y_;
  int n_ = 1;
};

}  // namespace

std::unique_ptr<Step> make_scale_shift_step(const BuildContext& ctx, const formats::Node& node,
                                            const Shape& input_shape, const void* x, void* y) {
  return std::make_unique<ScaleShiftStep>(ctx, node, input_shape, x, y);
}
std::unique_ptr<Step> make_concat_step(const BuildContext& ctx, const formats::Node& node,
                                       std::vector<ConcatInput> inputs, int64_t out_elements, void* y) {
  return std::make_unique<ConcatStep>(ctx, node, std::move(inputs), out_elements, y);
}

std::unique_ptr<Step> make_activation_step(const BuildContext& ctx, const formats::Node& node, int64_t elements,
                                           const void* x, void* y) {
  return std::make_unique<ActivationStep>(ctx, node, elements, x, y);
}
std::unique_ptr<Step> make_softmax_step(const BuildContext& ctx, const formats::Node& node, int64_t elements,
                                        const void* x, void* y) {
  return std::make_unique<SoftmaxStep>(ctx, node, elements, x, y);
}
std::unique_ptr<Step> make_add_step(const BuildContext& ctx, const formats::Node& node, int64_t elements,
                                    const void* a, const void* b, void* y) {
  return std::make_unique<AddStep>(ctx, node, elements, a, b, y);
}

}  // namespace engine::cudnn

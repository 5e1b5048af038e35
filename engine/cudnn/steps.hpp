#pragma once
// One Step per executed node (or fused node pair). A step is built once at compile time: it creates
// its descriptors, uploads its parameters, chooses its algorithm and reports the workspace it needs.
// At run time it only updates host-side descriptors when the batch size changes (set_batch) and
// enqueues library calls on the executable's stream (enqueue): no allocation, no synchronisation.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"
#include "engine/cudnn/cudnn_options.hpp"
#include "engine/cudnn/descriptors.hpp"
#include "engine/gpu/buffers.hpp"

namespace engine::cudnn {

// What every step sees while it is being built.
struct BuildContext {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublas_lt = nullptr;
  CompileOptions options;
  CudnnOptions cudnn_options;  // the backend's own choices (layout, space-to-depth, int8 tactic)
  int max_batch = 1;
  size_t workspace_limit = 0;  // largest convolution workspace an algorithm may ask for (bytes)
  cudaStream_t stream = nullptr;  // the executable's stream, for poisoning a step's private buffers
  Storage storage;                // element type and layout of every value and parameter
};

// What every step sees while it runs.
struct RunContext {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublas_lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;  // the handles' stream, for the few plain CUDA copies (concat)
};

class Step {
 public:
  explicit Step(std::string label) : label_(std::move(label)) {}
  virtual ~Step() = default;
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // Host only: re-describes the tensors for n samples (1 <= n <= max_batch).
  virtual void set_batch(int n) = 0;
  // Enqueues the step's library calls on the handles' stream.
  virtual void enqueue(const RunContext& ctx) = 0;
  // Device workspace the step needs for every n <= max_batch (bytes).
  virtual size_t workspace_bytes() const { return 0; }
  // One line for plan_summary(): what runs and which decisions were made.
  virtual std::string summary() const = 0;
  // Tactics: other ways to compute the same bits (int8 convolutions: cuDNN's kernel, or patches and a
  // cuBLAS GEMM). The executable times each at max_batch once everything is allocated and keeps the
  // fastest (CudnnExecutable::choose_tactics), TensorRT's builder's way; a step with one has nothing
  // to choose. CudnnOptions::int8_conv fixes the choice.
  virtual int tactics() const { return 1; }
  virtual void use_tactic(int /*t*/) {}
  virtual std::string tactic_name(int /*t*/) const { return {}; }
  // After the choice: frees what the other tactics hold; `ms` the measured times, for the summary.
  virtual void keep_tactic(const std::vector<float>& /*ms*/) {}
  const std::string& label() const { return label_; }

 protected:
  std::string label_;  // "node 'c1' (conv2d)": the context of every status check
};

// cuDNN's pooling (and other per-sample) kernels answer CUDNN_STATUS_NOT_SUPPORTED once N reaches
// 65,536 (cuDNN 9.14; onnxruntime#29819 reports N = 65,535 working and 65,536 failing): the batch
// maps onto a 16-bit grid dimension. Steps whose calls take N therefore run them on chunks of at
// most kBatchChunk samples. No arithmetic crosses samples in those calls, so chunking changes no
// result; it adds launches only above the chunk size.
constexpr int kBatchChunk = 32768;
// cudnnSetTensor4dDescriptor refuses a tensor of 2^31 elements or more (n · c · h · w must fit an
// int): a call's tensors stay below 2^31 elements, so a batch of large samples runs in smaller
// chunks. The bound is the library's own, not a rounder one below it: a tighter bound chunks tensors
// cuDNN takes whole (65,536 MNIST images through 32 channels, 1.6 G elements), and a chunked
// convolution gets a different (slower) algorithm for its chunk size.
constexpr int64_t kMaxTensorElements = (int64_t(1) << 31) - 1;

// The most samples one library call may take: `cap`, fewer where a sample has so many elements
// (`per_sample`: the largest per-sample tensor the call describes) that `cap` of them would pass
// kMaxTensorElements; at least 1.
inline int chunk_samples(int64_t per_sample, int cap = kBatchChunk) {
  const int64_t fit = kMaxTensorElements / std::max<int64_t>(per_sample, 1);
  return int(std::max<int64_t>(1, std::min<int64_t>(cap, fit)));
}

// A batch of n samples as full chunks of size() samples and a tail. The size is fixed at compile
// time (limit), so the chunks a run takes depend only on n.
class BatchChunks {
 public:
  // per_sample, cap: as chunk_samples. Call before set().
  void limit(int64_t per_sample, int cap = kBatchChunk) { size_ = chunk_samples(per_sample, cap); }
  int size() const { return size_; }
  void set(int n) {
    full_ = n / size_;
    tail_ = n % size_;
  }
  bool has_full() const { return full_ > 0; }
  int tail() const { return tail_; }
  // f(first_sample, is_tail) for each chunk, in order.
  template <typename F>
  void for_each(F&& f) const {
    for (int i = 0; i < full_; ++i) f(size_t(i) * size_t(size_), false);
    if (tail_ > 0) f(size_t(full_) * size_t(size_), true);
  }

 private:
  int size_ = kBatchChunk;
  int full_ = 0, tail_ = 0;
};

// Copies an NCHW tensor into the interior of a scratch buffer whose border holds a constant (0 for
// convolution and average pooling, -inf for max pooling), so cuDNN, whose descriptors only take
// symmetric padding, can run asymmetrically padded windows with padding 0. The border is written
// once at compile time; a run copies the interior only (cudnnTransformTensor).
class ExplicitPad {
 public:
  ExplicitPad(const BuildContext& ctx, const std::string& label, int channels, int height, int width,
              const formats::Window2D& window, float border_value, const void* source);
  void set_batch(int n);
  void enqueue(const RunContext& ctx);
  const void* padded() const { return scratch_.data(); }
  int padded_height() const { return padded_h_; }
  int padded_width() const { return padded_w_; }
  size_t scratch_bytes() const { return scratch_.bytes(); }

 private:
  void describe(int n, cudnnTensorDescriptor_t source, cudnnTensorDescriptor_t interior);

  std::string label_;
  Storage storage_;
  int c_, h_, w_, pad_top_, pad_left_, padded_h_, padded_w_;
  const void* source_;
  gpu::DeviceBuffer<unsigned char> scratch_;  // [max_batch, C, H + top + bottom, W + left + right]
  BatchChunks chunks_;
  TensorDesc source_full_, interior_full_, source_tail_, interior_tail_;
};

// Parameter-free node kinds and the node families, one factory each (conv.cpp, pool.cpp, dense.cpp,
// pointwise.cpp). `x` / `y` are device pointers to the [max_batch, elements] blocks of the input and
// output values.
struct ConvFusion {
  bool relu = false;  // a following relu node is computed by this step, which then writes its value
};
std::unique_ptr<Step> make_conv_step(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape,
                                     const void* x, void* y, ConvFusion fusion, const std::string& fused_name);
// conv2d as a space-to-depth convolution (conv_s2d.cpp): why `node` cannot take that path, or
// nullopt when it can (ctx: the batch planned for, CudnnOptions::space_to_depth); the step, with a
// following relu / tanh / sigmoid computed by it when given.
std::optional<std::string> space_to_depth_refusal(const BuildContext& ctx, const formats::Node& node,
                                                  const Shape& input_shape);
std::unique_ptr<Step> make_space_to_depth_conv_step(const BuildContext& ctx, const formats::Node& node,
                                                    const Shape& input_shape, const void* x, void* y,
                                                    std::optional<OpType> activation,
                                                    const std::string& activation_name);
std::unique_ptr<Step> make_pool_step(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape,
                                     const void* x, void* y);
// stored_shape: the input as it is stored ([C, H, W] when a flatten of it feeds the layer). With
// fused_relu set, the step also computes that following relu (in the GEMM's epilogue) and `y` is its
// block.
std::unique_ptr<Step> make_dense_step(const BuildContext& ctx, const formats::Node& node, const Shape& stored_shape,
                                      const void* x, void* y, const formats::Node* fused_relu);
std::unique_ptr<Step> make_activation_step(const BuildContext& ctx, const formats::Node& node, int64_t elements,
                                           const void* x, void* y);
std::unique_ptr<Step> make_softmax_step(const BuildContext& ctx, const formats::Node& node, int64_t elements,
                                        const void* x, void* y);
std::unique_ptr<Step> make_add_step(const BuildContext& ctx, const formats::Node& node, int64_t elements,
                                    const void* a, const void* b, void* y);

// y = x * scale[c] + shift[c] per channel (scale_shift; channels = the first per-sample dimension).
std::unique_ptr<Step> make_scale_shift_step(const BuildContext& ctx, const formats::Node& node,
                                            const Shape& input_shape, const void* x, void* y);
// Each input (device pointer, per-sample elements) copied into its slice of every output sample.
struct ConcatInput {
  const void* x = nullptr;
  int64_t elements = 0;  // per sample
  int64_t pixels = 1;    // H * W of a [C, H, W] value (NHWC storage concatenates per pixel), else 1
};
std::unique_ptr<Step> make_concat_step(const BuildContext& ctx, const formats::Node& node,
                                       std::vector<ConcatInput> inputs, int64_t out_elements, void* y);

// --precision int8 (int8.cpp): conv2d and dense as integer library calls between a quantization of
// the fp32 input (per tensor, scale from the model's calibration) and a dequantization of the sums
// (per output channel) + bias, with a following relu folded in when relu_name is not empty.
struct Int8Input {
  float scale = 0;         // s = range / 127 (0: the input reads as 0)
  double range = 0;        // the calibrated range
  std::string value_name;  // the value whose range it is (the input, or the source of a flatten)
};
std::unique_ptr<Step> make_int8_conv_step(const BuildContext& ctx, const formats::Node& node, const Shape& input_shape,
                                          const void* x, void* y, const Int8Input& input, const std::string& relu_name);
// stored_shape as make_dense_step's.
std::unique_ptr<Step> make_int8_dense_step(const BuildContext& ctx, const formats::Node& node,
                                           const Shape& stored_shape, const void* x, void* y, const Int8Input& input,
                                           const std::string& relu_name);

// Why this backend cannot run `node` exactly, or nullopt.
std::optional<std::string> unsupported_reason(const formats::Node& node);

// "node 'c1' (conv2d)"
std::string node_label(const formats::Node& node);
// Copies host floats, converted to the storage's element type, into a new device buffer (compile time
// only). Layout changes are the caller's (see nhwc_filter).
gpu::DeviceBuffer<unsigned char> upload(const std::vector<float>& values, const Storage& storage,
                                        const std::string& what);
// A [k, c, h, w] filter (or a [units, c, h, w] dense weight seen through a flatten) permuted to
// [k, h, w, c].
std::vector<float> nhwc_filter(const std::vector<float>& w, int k, int c, int h, int width);
// "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM"
const char* algo_name(cudnnConvolutionFwdAlgo_t algo);
const char* math_name(cudnnMathType_t math);
std::string format_bytes(size_t bytes);

}  // namespace engine::cudnn

namespace engine::cudnn {
// Versions of the libraries loaded at run time: "9.14.0", "13.0.2".
std::string cudnn_version();
std::string cublas_version();
}  // namespace engine::cudnn

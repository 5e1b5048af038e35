#include "engine/reference/reference_executable.hpp"

#include "engine/reference/reduced_precision.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>

namespace engine::reference {
namespace {

Dims3 dims_of(const Shape& shape, const std::string& node) {
  if (shape.size() != 3)
    throw std::invalid_argument(fmt::format("reference: node '{}' needs a [C, H, W] value, got {}", node,
                                            formats::shape_to_string(shape)));
  return Dims3{int(shape[0]), int(shape[1]), int(shape[2])};
}

// Multiply-adds (or elements touched) per sample: enough to tell a batch worth threading from one
// that is not.
int64_t work_of(const formats::Node& node, const Value& in) {
  const int64_t out = formats::element_count(node.output_shape);
  const int64_t window = int64_t(node.window.kernel_h) * node.window.kernel_w;
  switch (node.op) {
    case OpType::Conv2D: return out * in.shape.at(0) * window;
    case OpType::Dense: return out * in.elements;
    case OpType::AvgPool:
    case OpType::MaxPool: return out * window;
    default: return out;
  }
}

// Below this much work a thread costs more to wake (milliseconds when the cores are shared) than
// it saves.
constexpr int64_t kMinWorkPerThread = int64_t{1} << 20;

}  // namespace

ReferenceExecutable::ReferenceExecutable(const Graph& graph, const CompileOptions& options)
    : graph_(graph), max_batch_(options.max_batch), precision_(options.precision) {
  if (max_batch_ < 1) throw std::invalid_argument(fmt::format("reference: max_batch must be at least 1, got {}", max_batch_));
  const auto& input = graph_.model->input;
  raw_sample_elements_ = formats::element_count(input.raw_shape);
  if (input.dtype == formats::InputDType::UInt8) raw_dims_ = dims_of(input.raw_shape, input.name);

  for (const PlannedNode& planned : graph_.nodes) {
    const formats::Node& node = *planned.node;
    if (node.op == OpType::Flatten) continue;  // an alias of its input: nothing to compute
    Step step;
    step.op = node.op;
    step.inputs = planned.inputs;
    step.output = planned.output;
    const Value& in = graph_.values[planned.inputs.at(0)];
    step.in_elements = in.elements;
    switch (node.op) {
      case OpType::Conv2D:
      case OpType::AvgPool:
      case OpType::MaxPool:
        step.in_dims = dims_of(in.shape, node.name);
        step.out_dims = dims_of(graph_.values[planned.output].shape, node.name);
        step.window = &node.window;
        step.count_include_pad = node.count_include_pad;
        if (node.op == OpType::Conv2D)
          scratch_per_thread_ = std::max<int64_t>(scratch_per_thread_, int64_t(step.out_dims.height) * step.out_dims.width);
        break;
      case OpType::Dense:
        step.units = node.units;
        break;
      case OpType::ScaleShift:
        step.channels = in.shape.at(0);
        step.in_elements = in.elements / step.channels;
        break;
      default:
        break;
    }
    if (node.weight) step.weight = node.weight->values.data();
    if (node.bias) step.bias = node.bias->values.data();
    if ((node.op == OpType::Conv2D || node.op == OpType::Dense || node.op == OpType::ScaleShift) && !step.weight)
      throw std::invalid_argument(fmt::format("reference: node '{}' has no weight", node.name));
    if (node.op == OpType::ScaleShift && !step.bias)
      throw std::invalid_argument(fmt::format("reference: node '{}' (scale_shift) has no shift", node.name));
    steps_.push_back(step);
    work_per_sample_ += work_of(node, in);
  }

  prepare_reduced_precision(options);
  if (options.threads < 0 || options.threads > kMaxThreads)
    throw std::invalid_argument(fmt::format("reference: threads must be 1 to {} (0: all cores), got {}", kMaxThreads,
                                            options.threads));
  threads_ = options.threads > 0 ? options.threads : std::max(1, omp_get_max_threads());
  const int64_t per_sample = graph_.arena_floats_per_sample;
  if (uint64_t(per_sample) * uint64_t(threads_) > std::numeric_limits<size_t>::max() / sizeof(float))
    throw std::runtime_error(fmt::format("reference: an arena of {} floats per sample is too large", per_sample));
  const size_t total = size_t(per_sample) * size_t(threads_);
  // Linux overcommits: an allocation larger than the machine succeeds and the process is killed
  // while filling it. Refuse, with a clear message, anything over half of the physical memory.
  const double bytes = double(total) * sizeof(float) + double(scratch_per_thread_) * double(threads_) * sizeof(double);
  const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && bytes > memory / 2)
    throw std::runtime_error(fmt::format(
        "reference: {} threads need {:.1f} MiB of activation arenas and scratch, more than half of this machine's "
        "{:.1f} MiB of memory",
        threads_, bytes / (1 << 20), memory / (1 << 20)));
  try {
    // NaN everywhere: an element no step writes shows up in the outputs instead of passing as 0.
    arenas_.assign(total, std::numeric_limits<float>::quiet_NaN());
    scratch_.assign(size_t(scratch_per_thread_) * size_t(threads_), 0.0);
    quantized_.assign(size_t(quantized_per_thread_) * size_t(threads_), 0.0f);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(fmt::format("reference: cannot allocate {:.1f} MiB of activation arenas",
                                         double(total) * sizeof(float) / (1 << 20)));
  }

  summary_ = fmt::format(
      "reference: {} steps ({} nodes, flatten as aliases), {} threads with a {:.1f} KiB single-sample arena each, "
      "batches up to {}, double accumulation, always deterministic{}",
      steps_.size(), graph_.nodes.size(), threads_, double(per_sample) * sizeof(float) / 1024, max_batch_,
      options.precision == Precision::TF32   ? " (tf32 requested: the CPU has no TF32, fp32 used)"
      : options.precision == Precision::FP16 ? "; fp16 emulated: weights and every value rounded to fp16"
      : options.precision == Precision::BF16 ? "; bf16 emulated: weights and every value rounded to bf16"
      : options.precision == Precision::INT8
          ? "; int8 emulated: conv2d/dense inputs quantized per tensor (calibrated ranges), weights per output channel"
          : "");
}

void ReferenceExecutable::prepare_reduced_precision(const CompileOptions& options) {
  if (options.precision == Precision::FP32 || options.precision == Precision::TF32) return;
  const formats::Model& model = *graph_.model;
  if (options.precision == Precision::INT8 && !model.calibration)
    throw std::invalid_argument(fmt::format("model '{}' has no calibration data, which int8 needs: run engine calibrate "
                                            "MODEL DATA -o OUT.json first",
                                            model.name));
  // The range of a value, following aliases (flatten) to their source when the value has none.
  auto range_of = [&](int value) -> std::optional<double> {
    for (int v = value; v >= 0; v = graph_.values[v].alias_of)
      for (const auto& [name, r] : model.calibration->ranges)
        if (name == graph_.values[v].name) return r;
    return std::nullopt;
  };
  for (Step& step : steps_) {
    const bool has_weights = step.op == OpType::Conv2D || step.op == OpType::Dense || step.op == OpType::ScaleShift;
    if (!has_weights) continue;
    const Value& out = graph_.values[step.output];
    const int64_t rows = step.op == OpType::Conv2D ? out.shape.at(0) : step.op == OpType::Dense ? step.units : step.channels;
    const int64_t weight_count = step.op == OpType::Conv2D ? rows * step.in_dims.channels * step.window->kernel_h *
                                                                   step.window->kernel_w
                                 : step.op == OpType::Dense ? rows * step.in_elements
                                                            : rows;
    if (options.precision == Precision::INT8) {
      if (step.op == OpType::ScaleShift) continue;  // a per-channel affine: float, as the activations
      const auto r = range_of(step.inputs[0]);
      if (!r)
        throw std::invalid_argument(fmt::format("model '{}': its calibration has no range for '{}', the input of a {} "
                                                "node: calibrate the model again (engine calibrate)",
                                                model.name, graph_.values[step.inputs[0]].name,
                                                formats::op_name(step.op)));
      step.quantize_input = true;
      step.input_scale = float(*r) / 127.0f;  // 0 for a value calibrated as all zeros: it reads as 0
      owned_.push_back(quantize_per_channel(step.weight, rows, weight_count / rows));
      step.weight = owned_.back().data();
      quantized_per_thread_ = std::max(quantized_per_thread_, graph_.values[step.inputs[0]].elements);
      continue;
    }
    auto rounded = [&](const float* v, int64_t n) {
      std::vector<float> out_v(v, v + n);
      round_value(out_v.data(), n);
      return out_v;
    };
    owned_.push_back(rounded(step.weight, weight_count));
    step.weight = owned_.back().data();
    if (step.bias) {
      owned_.push_back(rounded(step.bias, rows));
      step.bias = owned_.back().data();
    }
  }
}

void ReferenceExecutable::round_value(float* v, int64_t n) const {
  if (precision_ == Precision::FP16)
    for (int64_t i = 0; i < n; ++i) v[i] = round_to_fp16(v[i]);
  else if (precision_ == Precision::BF16)
    for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(v[i]);
}

void ReferenceExecutable::run_sample(const void* input, int s, float* arena, double* scratch, float* quantized,
                               std::span<float* const> outputs) const {
  const auto& in_spec = graph_.model->input;
  float* x = value_in(arena, graph_.input);
  if (in_spec.dtype == formats::InputDType::UInt8) {
    preprocess_uint8(static_cast<const uint8_t*>(input) + int64_t(s) * raw_sample_elements_, raw_dims_,
                     *in_spec.preprocess, x);
  } else {
    std::memcpy(x, static_cast<const float*>(input) + int64_t(s) * raw_sample_elements_,
                size_t(raw_sample_elements_) * sizeof(float));
  }

  const bool rounds = precision_ == Precision::FP16 || precision_ == Precision::BF16;
  if (rounds) round_value(x, graph_.values[graph_.input].elements);
  for (const Step& step : steps_) {
    const float* a = value_in(arena, step.inputs[0]);
    float* y = value_in(arena, step.output);
    if (step.quantize_input) {
      const int64_t n = graph_.values[step.inputs[0]].elements;
      for (int64_t i = 0; i < n; ++i) quantized[i] = fake_quantize(a[i], step.input_scale);
      a = quantized;
    }
    switch (step.op) {
      case OpType::Conv2D: conv2d(a, step.in_dims, step.weight, step.bias, *step.window, step.out_dims, y, scratch); break;
      case OpType::AvgPool: avgpool(a, step.in_dims, *step.window, step.count_include_pad, step.out_dims, y); break;
      case OpType::MaxPool: maxpool(a, step.in_dims, *step.window, step.out_dims, y); break;
      case OpType::Relu: relu(a, step.in_elements, y); break;
      case OpType::Tanh: tanh(a, step.in_elements, y); break;
      case OpType::Sigmoid: sigmoid(a, step.in_elements, y); break;
      case OpType::Dense: dense(a, step.in_elements, step.weight, step.bias, step.units, y); break;
      case OpType::Softmax: softmax(a, step.in_elements, y); break;
      case OpType::Add: add(a, value_in(arena, step.inputs[1]), step.in_elements, y); break;
      case OpType::ScaleShift: scale_shift(a, step.channels, step.in_elements, step.weight, step.bias, y); break;
      case OpType::Concat: {
        // Per sample a value is contiguous, so joining along the first dimension is copying each
        // input whole, one after the other.
        for (int input : step.inputs) {
          const Value& v = graph_.values[input];
          std::memcpy(y, value_in(arena, input), size_t(v.elements) * sizeof(float));
          y += v.elements;
        }
        break;
      }
      case OpType::Flatten: break;  // never a step
    }
    if (rounds) round_value(value_in(arena, step.output), graph_.values[step.output].elements);
  }

  for (size_t i = 0; i < outputs.size(); ++i) {
    const Value& v = graph_.values[graph_.outputs[i]];
    std::memcpy(outputs[i] + int64_t(s) * v.elements, value_in(arena, graph_.outputs[i]),
                size_t(v.elements) * sizeof(float));
  }
}

void ReferenceExecutable::run(const void* input, int n, std::span<float* const> outputs) {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("reference: batch of {} samples outside 1..{}", n, max_batch_));
  if (outputs.size() != graph_.outputs.size())
    throw std::invalid_argument(fmt::format("reference: expected {} output buffers, got {}", graph_.outputs.size(),
                                            outputs.size()));
  if (!input) throw std::invalid_argument("reference: no input");

  // Each sample is computed whole by one thread, in a fixed order: the result depends neither on
  // the thread count nor on the schedule, so runs are bitwise reproducible.
  const int64_t worth = std::max<int64_t>(1, work_per_sample_ * n / kMinWorkPerThread);
  const int threads = int(std::min<int64_t>({threads_, n, worth}));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int s = 0; s < n; ++s) {
    const int t = omp_get_thread_num();
    run_sample(input, s, arenas_.data() + int64_t(t) * graph_.arena_floats_per_sample,
               scratch_.data() + int64_t(t) * scratch_per_thread_, quantized_.data() + int64_t(t) * quantized_per_thread_,
               outputs);
  }
}

void ReferenceExecutable::stage_input(const void* input, int n) {
  if (n < 1 || n > max_batch_)
    throw std::invalid_argument(fmt::format("reference: batch of {} samples outside 1..{}", n, max_batch_));
  if (!input) throw std::invalid_argument("reference: no input");
  if (staged_outputs_.empty()) {
    for (size_t i = 0; i < graph_.outputs.size(); ++i)
      staged_outputs_.emplace_back(size_t(graph_.output_elements(i)) * size_t(max_batch_));
    for (auto& v : staged_outputs_) staged_pointers_.push_back(v.data());
  }
  staged_input_ = input;
}

void ReferenceExecutable::compute(int n) {
  if (!staged_input_) throw std::logic_error("reference: compute() before stage_input()");
  run(staged_input_, n, staged_pointers_);
}

const float* ReferenceExecutable::staged_output(size_t i) const {
  if (i >= staged_outputs_.size()) throw std::out_of_range("reference: staged_output() before stage_input(), or no such output");
  return staged_outputs_[i].data();
}

}  // namespace engine::reference

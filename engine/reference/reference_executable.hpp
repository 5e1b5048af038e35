#pragma once
// A Graph compiled for the CPU: one step per node that computes something (flatten is an alias and
// has no step) and one single-sample arena per thread. run() allocates nothing.
//
// Each thread takes whole samples and runs every step on one before the next, in its own arena laid
// out by the plan for a batch of one. The plan's [max_batch, elements] layout assumes the whole
// batch moves node by node; following it on the CPU would need a barrier after every node, which
// costs milliseconds when the cores are shared, and a 37 KB LeNet arena per thread stays in cache.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"
#include "engine/reference/ops.hpp"

namespace engine::reference {

class ReferenceExecutable : public Executable, public StagedExecution {
 public:
  ReferenceExecutable(const Graph& graph, const CompileOptions& options);

  int max_batch() const override { return max_batch_; }
  void run(const void* input, int n, std::span<float* const> outputs) override;
  std::string plan_summary() const override { return summary_; }

  // Staged execution (engine bench). Everything is synchronous and on the host: stage_input keeps
  // the pointer (preprocessing is fused into each sample's pass), compute runs the batch into host
  // output buffers allocated by the first stage_input, fetch_outputs has nothing to move.
  StagedExecution* staged_execution() override { return this; }
  void stage_input(const void* input, int n) override;
  void compute(int n) override;
  void fetch_outputs(int /*n*/) override {}
  const float* staged_output(size_t i) const override;

 private:
  struct Step {
    OpType op = OpType::Relu;
    std::vector<int> inputs;    // value ids (concat: any number; the others: 1 or 2)
    int output = -1;
    Dims3 in_dims, out_dims;    // conv2d and pools
    int64_t in_elements = 0;    // elementwise ops, dense, softmax; scale_shift: elements per channel
    int64_t channels = 0;       // scale_shift
    const formats::Window2D* window = nullptr;
    bool count_include_pad = true;
    int units = 0;
    const float* weight = nullptr;  // into graph_.model's tensors, which the Graph keeps alive,
    const float* bias = nullptr;    // or into owned_ (reduced precisions)
    bool quantize_input = false;    // int8 conv2d / dense: read the input quantized with input_scale
    float input_scale = 0;
  };

  // Value `value` of the sample being computed in `arena` (a thread's single-sample arena).
  float* value_in(float* arena, int value) const { return arena + graph_.values[value].arena_offset; }
  void run_sample(const void* input, int s, float* arena, double* scratch, float* quantized,
                  std::span<float* const> outputs) const;
  void prepare_reduced_precision(const CompileOptions& options);
  void round_value(float* v, int64_t n) const;  // fp16 / bf16 storage

  Graph graph_;
  int max_batch_ = 0;
  int threads_ = 1;            // fixed at compile time: one arena each
  std::vector<float> arenas_;  // threads_ x arena_floats_per_sample
  int64_t scratch_per_thread_ = 0;
  std::vector<double> scratch_;  // threads_ x scratch_per_thread_: conv accumulators
  std::vector<Step> steps_;
  int64_t raw_sample_elements_ = 0;
  int64_t work_per_sample_ = 0;  // multiply-adds, roughly: decides how many threads a batch gets
  Dims3 raw_dims_;
  std::string summary_;
  Precision precision_ = Precision::FP32;
  std::vector<std::vector<float>> owned_;  // weights and biases rounded or quantized (reduced precisions)
  int64_t quantized_per_thread_ = 0;
  std::vector<float> quantized_;  // threads_ x quantized_per_thread_: an int8 step's dequantized input
  const void* staged_input_ = nullptr;
  std::vector<std::vector<float>> staged_outputs_;  // per output: max_batch x elements
  std::vector<float*> staged_pointers_;
};

}  // namespace engine::reference

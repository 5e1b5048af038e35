#pragma once
// The compiled form of a Graph for the cudnn backend: handles bound to the executable's stream, one
// Step per node (conv or dense + following relu fused), one convolution workspace sized for the largest layer
// and every batch size, a fixed cuBLAS workspace. forward(n) only re-describes tensors when n changes
// (host-only) and enqueues library calls.
#include <memory>
#include <string>
#include <vector>

#include "engine/cudnn/cudnn_options.hpp"
#include "engine/cudnn/descriptors.hpp"
#include "engine/cudnn/steps.hpp"
#include "engine/gpu/gpu_executable.hpp"

namespace engine::cudnn {

class CudnnExecutable final : public gpu::GpuExecutable {
 public:
  CudnnExecutable(const Graph& graph, const CompileOptions& options, const CudnnOptions& cudnn_options);
  ~CudnnExecutable() override;

  void forward(int n) override;
  std::string plan_summary() const override;
  // One forward pass at max_batch, timed on the executable's stream (ms; after a warm-up pass).
  float time_forward_ms();
  // A line for the plan summary, after its first (the backend's precision choice).
  void add_plan_note(const std::string& line);

 private:
  void build_steps(const BuildContext& ctx);
  // Times each tactic of the steps that have several (Step::tactics) at max_batch, keeps the fastest.
  void choose_tactics();
  bool blocks_overlap(int value_a, int value_b) const;
  // Where a conv may write the value of the relu that follows it (see build_steps), or nullptr.
  void* fused_relu_destination(size_t conv_index);
  void* value_ptr(int value_id) const { return value_ptr_.at(size_t(value_id)); }
  Storage choose_storage();
  // int8: the scale of a conv2d's / dense's input from the model's calibration, or throws.
  Int8Input int8_input(int value, const formats::Node& reader) const;
  // Reduced precision or NHWC: the input's and outputs' own blocks and their conversion steps (the
  // input's into steps_, the outputs' into `exits`, appended after the nodes).
  void add_edge_conversions(std::vector<std::unique_ptr<Step>>& exits);

  CudnnOptions cudnn_options_;
  CudnnHandle cudnn_;
  gpu::DeviceBuffer<unsigned char> cublas_workspace_;  // declared first: outlives the handle using it
  CublasHandle cublas_;
  CublasLtHandle cublas_lt_;  // dense layers (GEMM + bias/relu epilogue)
  Storage storage_;
  std::string storage_note_;       // why the layout is not the precision's usual one, if so
  std::vector<void*> value_ptr_;  // per value id: its arena block, or the block it was moved to
  std::vector<std::string> fusion_notes_;
  // values moved out of the arena (by a fusion, or into the storage type at the graph's edges)
  std::vector<gpu::DeviceBuffer<unsigned char>> private_blocks_;
  std::vector<std::unique_ptr<Step>> steps_;
  gpu::DeviceBuffer<unsigned char> workspace_;  // convolution workspace, shared by every layer
  RunContext run_ctx_;
  int batch_ = -1;  // the n the descriptors currently describe
  std::vector<std::string> summary_;
};

}  // namespace engine::cudnn

#pragma once
// Planner choices of the cudnn backend that a caller may fix instead of leaving them to the backend.
// The defaults are the backend's own choices (what the registry's "cudnn" compiles with); tests set
// the others to cover each path whatever the batch, precision or timing would choose.
#include <memory>

#include "engine/core/backend.hpp"
#include "engine/gpu/precision_choice.hpp"

namespace engine::cudnn {

struct CudnnOptions {
  // Storage layout of values and parameters. Auto: NCHW for fp32 and TF32, NHWC for fp16, bf16 and
  // int8 (cudnn_executable.cpp, choose_storage). A flatten of a [C, H, W] value that feeds anything
  // but a dense layer keeps NCHW even when NHWC is asked for.
  enum class Layout { Auto, Nchw, Nhwc };
  Layout layout = Layout::Auto;

  // The space-to-depth convolution for few output channels (conv_s2d.cpp). Auto: where it applies
  // and the executable is planned for enough images to repay its two extra copies; Always: where it
  // applies, whatever the batch; Never: the direct convolution.
  enum class SpaceToDepth { Auto, Always, Never };
  SpaceToDepth space_to_depth = SpaceToDepth::Auto;

  // The int8 convolution's tactic (int8.cpp). Fastest: each is timed at compile time and the fastest
  // kept; the others fix it (compile fails where a convolution lacks that tactic).
  enum class Int8Conv { Fastest, Cudnn, Gemm, GemmT };
  Int8Conv int8_conv = Int8Conv::Fastest;

  // Dense layers (dense.cpp). CublasLt: cublasLtMatmul with the bias and a following relu in its
  // epilogue, one algorithm for every batch size (cublasGemmEx where cuBLASLt offers none); Gemm:
  // cublasGemmEx + cudnnAddTensor + the relu's own pass, cuBLAS's heuristic choice per call.
  enum class Dense { CublasLt, Gemm };
  Dense dense = Dense::CublasLt;

  // A reduced precision (int8, fp16, bf16). Fastest: a permission, TensorRT's way: the model is
  // compiled at each precision it allows (engine/gpu/precision_choice.hpp: int8 also fp16 and fp32,
  // fp16 / bf16 also fp32), one forward pass of each timed at max_batch, the fastest kept; the plan
  // states which and the times. AsAsked: exactly the precision asked (tests of a precision's own kernels).
  using PrecisionChoice = gpu::PrecisionChoice;
  PrecisionChoice precision_choice = PrecisionChoice::Fastest;
};

// The tactic's name as Step::tactic_name spells it ("cudnn", "gemm", "gemm_t"); "" for Fastest.
const char* int8_conv_name(CudnnOptions::Int8Conv tactic);

// The cudnn backend with these choices; BackendRegistry's "cudnn" is make_cudnn_backend({}).
std::unique_ptr<Backend> make_cudnn_backend(const CudnnOptions& options = {});

}  // namespace engine::cudnn

#pragma once
// The image chain's trace hooks (image_chain.cu, and through it conv_layers.cuh and
// dense_steps.cuh): no-ops in the product, so they compile to nothing. A traced build
// (-DENGINE_IMAGE_CHAIN_TRACE=1) takes their definitions from dev/fused_trace/, which stamps and
// prints where a batch-1 forward spends its time (dev/fused_trace/README.md).
#if ENGINE_IMAGE_CHAIN_TRACE
#include "dev/fused_trace/image_chain_trace.cuh"
#else
#define TRACE_STAMP() \
  do {                \
  } while (0)
#define CONV_TRACE_STAMP() TRACE_STAMP()
#define CONV_LAYER_MARK(l, kind) TRACE_STAMP()
#define DENSE_MARK(l, kind, fdep) TRACE_STAMP()
#define CHAIN_CLOCK_BEGIN() TRACE_STAMP()
#define CHAIN_CLOCK_END(sum, rows) TRACE_STAMP()
#define CHAIN_MARK(i, fdep, idep) TRACE_STAMP()
#define TRACE_CONV_LAYER(l) TRACE_STAMP()
#define TRACE_ENTRY() TRACE_STAMP()
#define TRACE_EXIT(cluster_size) TRACE_STAMP()
#define TRACE_LAUNCH_CONFIG(config, cluster) TRACE_STAMP()
#endif

#pragma once
// The custom backend's tensor-core general path for --precision fp16 | bf16 (host side, no CUDA
// calls): the plan for the graphs it takes so far,
//
//   input -> (conv2d [-> act] [-> add [-> act]] | maxpool | avgpool | concat)* -> [flatten]
//         -> dense [-> act] -> ... -> dense [-> act] [-> softmax]
//
// (act: relu, tanh, sigmoid; a value may have several readers). Every conv2d and dense layer is
// one GEMM (tc_dense_gemm.hpp; a conv2d an implicit GEMM) with its activation, and an add after a
// conv2d with the other addend, in the epilogue; every pool one small kernel; a concat of conv2d
// outputs with channels in multiples of 8 costs nothing (each writes its slice of the concat's
// pixels). Activations between layers are stored in the 16-bit format, in buffers reused once their
// values are read: a conv2d's or pool's as NHWC pixels with the channels padded to 8, a dense
// layer's as rows padded to 8 elements. The first layer rounds the preprocessed fp32 input (NCHW)
// while it stages it; the last, a dense layer, writes fp32. Weights are packed here once into the
// kernel's layout: a conv2d's k runs over (tap, padded channel), and the first dense layer after
// NHWC pixels takes its weights permuted from the model's NCHW flatten order, so no activation is
// ever transposed. Any other graph is refused with the node and the reason; it runs the per-node
// tensor-core path (tc_gemm.hpp).
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/launch_common.hpp"
#include "engine/custom/tc_general/tc_dense_gemm.hpp"

namespace engine::custom::tcg {

enum class TcgKind { Dense, Conv, Pool };

struct TcgLayer {
  TcgKind kind = TcgKind::Dense;
  int node = -1;            // the dense / conv2d / pool node (graph index)
  int tail = -1;            // the last node the layer runs (its activation, its add)
  int in_features = 0, units = 0;  // a conv2d: K before padding, output channels
  int rows_per_image = 1;   // GEMM rows (conv2d, maxpool: output pixels)
  TcConvGeometry conv;      // conv2d and maxpool: the window and sizes (pitch: input channels as stored)
  int in_buffer = -1;       // 16-bit activation buffer read (TcgPlan::buffers); -1: the graph input
  int out_buffer = -1;      // buffer written; -1: the graph output (the last layer)
  int out_offset = 0;       // first channel written in each stored pixel (a concat's slice)
  int cols = 0;             // 16-bit columns written per row (channels padded to 8; ldy but in a concat)
  Activation act = Activation::None;
  bool average = false, count_include_pad = true;  // a pool: avgpool
  int res_buffer = -1;      // a conv2d followed by an add: the other addend's buffer (same pixels)
  int res_pitch = 0;
  Activation post_act = Activation::None;  // the activation after that add
  bool first = false, last = false;
  int ldx = 0;              // dense input row pitch: the first layer in_features (fp32), else as stored
  int ldy = 0;              // output row pitch as stored: 16-bit channels (a concat's all) or units
                            // padded to 8; the last layer units (fp32)
  int k_padded = 0;         // K rounded up to kTcgBk
  int rows_padded = 0;      // units rounded up to kTcgRowAlign
  std::vector<uint16_t> weight;  // [rows_padded][k_padded], fp16 or bf16 bits, zeros in the padding
  std::vector<float> bias;       // [rows_padded]
  std::string context;           // names the node and what runs in its epilogue
};

struct TcgPlan {
  bool bf16 = false;
  std::vector<TcgLayer> layers;  // in the graph's order
  std::vector<long long> buffers;  // 16-bit elements per image of each activation buffer
  int input_value = -1;
  int output_value = -1;    // the graph's one output
  int softmax_node = -1;    // >= 0: a softmax of the last layer's fp32 output writes the graph output
  std::vector<int> nodes;   // every node of the graph (one fusion group)
};

// The plan, or why this path does not take the graph (naming the node). `convolutions`: false
// refuses conv2d, pool and add nodes (TcGeneralOptions::convolutions).
std::variant<TcgPlan, std::string> plan_tc_general(const Graph& graph, bool bf16, bool convolutions);

}  // namespace engine::custom::tcg

#pragma once
// What the custom backend's paths read off a planned node the same way: its activation, its
// window fields, a pool's shape. Host only, no fmt: included from the planners of every path.
#include <optional>

#include "engine/core/graph.hpp"
#include "engine/custom/launch_common.hpp"
#include "engine/custom/pooling.hpp"

namespace engine::custom {

inline std::optional<Activation> activation_of(formats::OpType op) {
  switch (op) {
    case formats::OpType::Relu: return Activation::Relu;
    case formats::OpType::Tanh: return Activation::Tanh;
    case formats::OpType::Sigmoid: return Activation::Sigmoid;
    default: return std::nullopt;
  }
}

// The window fields every windowed shape carries (bottom/right padding is implied by the output
// size the planner computed).
template <typename WindowedShape>
void set_window(WindowedShape& s, const formats::Window2D& w) {
  s.kernel_h = w.kernel_h;
  s.kernel_w = w.kernel_w;
  s.stride_h = w.stride_h;
  s.stride_w = w.stride_w;
  s.pad_top = w.pad_top;
  s.pad_left = w.pad_left;
}

// A windowed node's sizes and window from its [C, H, W] input and output values: a pool's
// shape, or (with out_channels) a conv's, whichever struct the path's kernel takes.
template <typename WindowedShape>
void set_windowed_shape(WindowedShape& s, const formats::Node& node, const Value& in, const Value& out) {
  s.channels = int(in.shape.at(0));
  s.height = int(in.shape.at(1));
  s.width = int(in.shape.at(2));
  s.out_height = int(out.shape.at(1));
  s.out_width = int(out.shape.at(2));
  if constexpr (requires { s.out_channels; }) s.out_channels = int(out.shape.at(0));
  set_window(s, node.window);
}

inline Pool2dShape pool_shape(const formats::Node& node, const Value& in, const Value& out) {
  Pool2dShape s;
  set_windowed_shape(s, node, in, out);
  return s;
}

}  // namespace engine::custom

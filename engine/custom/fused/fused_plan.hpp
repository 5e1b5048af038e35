#pragma once
// When a graph takes the custom backend's fused path, and the plan for it (host side; no CUDA).
//
// The rule: the graph is one chain (each node reads the previous node's output, or the graph input
// for the first, nobody else reads it, and the last node's output is the only graph output) of
//   [conv2d | avgpool | maxpool | relu | tanh | sigmoid]*  [flatten]  [dense | relu | tanh | sigmoid]*  [softmax]
// within the limits below, so that one image's activations and the conv weights fit in a block's
// shared memory. Activations are folded into the epilogue of whatever produced their input (at most
// kMaxEpilogueActs in a row). Anything else (add, scale_shift, concat, branches, several outputs, a
// softmax that is not last, a model too big for shared memory) runs the per-node kernels, and the
// plan says why.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/fused/fused_layers.hpp"

namespace engine::custom::fused {

struct DeviceShape {
  int multiprocessors = 1;
  int shared_optin_bytes = 48 * 1024;  // the largest dynamic shared memory a block may ask for
};

struct DenseWeights {
  std::vector<float> weight_t;  // [in_padded][units_padded]
  std::vector<float> bias;      // [units_padded]
};

struct FusedPlan {
  std::vector<FusionGroup> groups;  // for engine::fuse_groups: the conv chain, the dense chain
  bool has_conv = false, has_dense = false;
  ConvChainParams conv{};
  std::vector<float> conv_weights;  // packed conv weights and biases, staged per block
  int conv_input_value = -1, conv_output_value = -1;  // value ids
  DenseChainParams dense{};
  std::vector<DenseWeights> dense_weights;  // per dense layer; device pointers set at upload
  int dense_input_value = -1, dense_output_value = -1;
  // Both chains: floats per sample the conv chain hands to the dense chain through the executable's
  // own buffer (the two run as one fusion group, so the value has no arena block); 0 otherwise.
  int64_t handoff_floats = 0;
  std::vector<std::string> summary;  // one line per kernel: what it runs, tile, shared memory
  // The image chain for small batches (same bits as the two kernels above), when the model fits.
  bool has_image = false;
  ImageChainParams image{};
  std::vector<float> image_conv_weights;  // the conv weights packed for kImageOcb
  std::string image_why;                  // why there is no image chain
};

// The fused plan, or the reason the graph does not qualify (one line, names the node).
std::variant<FusedPlan, std::string> plan_fused(const Graph& graph, const DeviceShape& device);

// The image chain's per-cluster-size conv set-up (SpatialLayer::image_split, image_per, inv_*) from
// p.conv_split_items and p.conv_split_blocks: plan_fused calls it, and the executable again where
// ImageChainOptions change those two.
void plan_image_conv_setup(ImageChainParams& p);
// How many blocks of a cluster of `size` sum one chunk each of the last dense layer (the dense tail,
// ImageChainParams::tail_runs), or 0. The kernel trusts it: every block with a run
// must sum the layer before the last on chunk warps (its DenseShare), or block 0 would wait forever.
int image_tail_runs(const ImageChainParams& p, int size);
// Which cluster kernel runs the image chain (ImageChainParams::cluster_kernel) and, for the plan's
// summary, why: a specialised one when every hand-off is asynchronous, every conv layer is a
// tiled K x K one of the same K, and the dense chunks run the default loop; else the general one.
// Called by the executable (ImageChainOptions::general_cluster_kernel forces the general one).
std::string plan_image_cluster_kernel(ImageChainParams& p, bool force_general);

}  // namespace engine::custom::fused

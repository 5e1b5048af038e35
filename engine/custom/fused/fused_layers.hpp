#pragma once
// What the fused kernels are told about a model: plain structs passed by value as kernel
// parameters (no pointers into host memory, no fmt: included from .cu files). Built once at compile
// time by fused_plan.cpp; see that file for the rules that decide whether a graph qualifies.
//
// Two kernels run a whole chain (tiny-cuda-nn's "fully fused" idea, split where the weights stop
// fitting on chip):
//   conv chain:  the spatial part (conv2d / avgpool / maxpool, activations folded into the epilogue
//                of whatever produced their input) for a tile of T images per block, every
//                intermediate in shared memory, conv weights staged in shared memory once per block;
//   dense chain: the dense part (dense + activation ..., softmax) for a tile of TM images per block,
//                activations in shared memory, weights read through L1/L2 as float4 rows.
// Both accumulate in fp32 in a fixed order (bias first, then input channel / kernel column / kernel
// row, or k ascending in chunks: DenseLayer::chunk_rows): deterministic, independent of the tile an image lands in.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace engine::custom::fused {

inline constexpr int kMaxSpatialLayers = 16;
inline constexpr int kMaxDenseLayers = 16;
inline constexpr int kMaxEpilogueActs = 3;  // activations applied one after another to a result
inline constexpr int kConvThreads = 256;
inline constexpr int kDenseThreads = 256;
inline constexpr int kConvRowsPerThread = 4;  // YB: output rows a thread keeps in registers (or 2: SpatialLayer::rows)
// The one-image-per-block kernel for small batches (image_chain.cu): more threads, smaller work items
// (2 output channels x 2 rows), each dense layer's weights staged through shared memory in slices
// of kImageSliceFloats, two slices in turn (the next one loads while the block computes on this one).
inline constexpr int kImageThreads = 512;
inline constexpr int kImageRowsPerThread = 2;
inline constexpr int kImageOcb = 2;
inline constexpr int kImageSliceFloats = 8192;
inline constexpr int kImageMaxCluster = 8;  // blocks that share one image (a portable cluster size)
// The dense chain v2's weight slices: rows of weight_t up to this many floats (at least 4 rows).
inline constexpr int kDenseSliceFloats = 4096;

enum class Act : int { None = 0, Relu = 1, Tanh = 2, Sigmoid = 3 };

struct Epilogue {
  int count = 0;
  Act acts[kMaxEpilogueActs] = {};
  // The same, packed (count in bits 0-1, then 2 bits per activation): the one word the kernels
  // read, once per layer, into a register. Kept in step with count/acts by add().
  unsigned code = 0;

  void add(Act a) {
    code |= unsigned(a) << (2 + 2 * count);
    acts[count++] = a;
    code = (code & ~3u) | unsigned(count);
  }
};

// One activation value of T images in shared memory: image t, channel c, interior row y, column x
// lives at off + t * image + c * channel + (y + pad_top) * pitch + (x + pad_left). A buffer read
// by a convolution with padding has zero borders of that padding; a buffer read by a tiled
// convolution has slack rows at the bottom (read, never used) so its last row strip needs no bounds
// check.
struct SmemTensor {
  int off = 0;
  int image = 0, channel = 0, pitch = 0;
  int pad_top = 0, pad_left = 0;
  int channels = 0, height = 0, width = 0;  // interior
  int zero_fill = 0;                        // the whole buffer is zeroed before it is written
  int dense = 0;  // no padding, no slack: image i, element e at off + i * image + e (plain copies)
};

// Conv variants: which template instance of the tiled convolution runs (a square K x K kernel with
// vertical stride 1, K known at compile time; OCB output channels per thread), or the generic one
// (runtime kernel and strides).
enum class ConvVariant : int {
  Generic4 = 0, Generic8 = 1,
  K2_4 = 2, K2_6 = 3, K2_8 = 4,
  K3_4 = 5, K3_6 = 6, K3_8 = 7,
  K5_4 = 8, K5_6 = 9, K5_8 = 10,  // square K x K kernels
  // The image chain's: 2 output channels per thread (and 2 rows for the tiled ones).
  Generic2 = 11, K2_2 = 12, K3_2 = 13, K5_2 = 14,
};

enum class SpatialOp : int { Conv = 0, MaxPool = 1, AvgPool = 2 };

struct SpatialLayer {
  SpatialOp op = SpatialOp::Conv;
  ConvVariant variant = ConvVariant::Generic8;
  SmemTensor in, out;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0;  // pools: logical padding (bounds-checked); convs: in the buffer
  int count_include_pad = 1;      // avgpool
  int ocb = 8;                    // output channels per thread (conv)
  int rows = kConvRowsPerThread;  // tiled conv: output rows per thread (4, or 2 where 4 would compute junk rows)
  int oc_padded = 0;              // out channels rounded up to ocb; weights are zero past out.channels
  int weight_off = 0;             // conv: packed weights [oc_padded/ocb][C][kh][kw][ocb] in the staged block
  int bias_off = 0;               // conv: [oc_padded] (zeros when the node has no bias)
  // The image chain's tiled convs: the weights again as [oc_padded][C][round_up(K * K, 4)], for the
  // one-channel items' float4 loads (conv_tiled's kOneChannelWeights); -1: none.
  int split_weight_off = -1;
  Epilogue epilogue;
  // A 2x2 stride-2 unpadded pool folded into a tiled conv (version 2): the conv's 4 rows x 2
  // neighbouring columns (this lane's and its partner lane's) make 2 pooled rows; `out` is then the
  // pool's output and `epilogue` applies before pooling, `pool_epilogue` after.
  SpatialOp pool = SpatialOp::Conv;  // Conv: no folded pool; MaxPool / AvgPool
  Epilogue pool_epilogue;
  int conv_out_h = 0, conv_out_w = 0;  // the conv's own output size when a pool is folded in
  // The image chain's clusters, tiled convs only (plan_image_conv_setup, fused_plan.cpp): decided on
  // the host once instead of at every layer's start on the batch-1 critical path (the split rule's
  // and WorkRange's integer divisions, the Divisors' reciprocals). Bit s of image_split: clusters of 2^s blocks take one-channel items;
  // image_per[s]: a block's share of the items there (whole warps); inv_*: the correctly rounded
  // reciprocals of the conv's output width, row strips, and channel groups of two / one channel(s).
  int image_split = 0;
  int image_per[4] = {};
  float inv_ow = 0.0f, inv_strips = 0.0f, inv_groups[2] = {};
};

struct ConvChainParams {
  int layer_count = 0;
  SpatialLayer layers[kMaxSpatialLayers];
  SmemTensor input;           // where the tile's input lands
  Epilogue input_epilogue;    // activations that read the graph input directly
  int input_channels = 0, input_height = 0, input_width = 0;  // per sample, in global memory
  int output_elements = 0;    // per sample: the last layer's [C, H, W], written flattened (CHW)
  int tile_images = 1;        // T
  int weight_floats = 0;      // staged once per block at the start of the shared memory
  int smem_floats = 0;        // total dynamic shared memory, in floats
};

struct DenseLayer {
  int in = 0, in_padded = 0;    // K, rounded up to 4
  int units = 0, units_padded = 0;
  int in_off = 0, out_off = 0;  // shared-memory buffers (floats), each [TM][pitch]
  int in_pitch = 0, out_pitch = 0;
  const float* weight_t = nullptr;  // device [in_padded][units_padded], zero padded (transposed)
  const float* weight_u = nullptr;  // the image chain's copy, unit-major: [units_padded][in_padded]
  const float* bias = nullptr;      // device [units_padded], zero padded (zeros when no bias)
  Epilogue epilogue;
  int slice_rows = 0;  // rows of weight_t per staged slice (the image chain's, or the dense chain v2's)
  // The summation order of every unit (every kernel, so the same bits): the bias, then rows
  // [0, chunk_rows) one fmaf per step; each later chunk of chunk_rows rows (the last one ends at
  // in_padded) summed on its own from zero, one fmaf per step, and added to the running sum in
  // chunk order. chunk_rows >= in_padded is the plain order (bias, then every k ascending). Chunks
  // let the image chain sum one unit's chunks on several warps at once (a dependent chain of f5's
  // 400 steps is the longest stretch of batch 1). A multiple of 4.
  int chunk_rows = 0;
};

struct DenseChainParams {
  int layer_count = 0;
  DenseLayer layers[kMaxDenseLayers];
  int softmax = 0;           // a softmax over the last layer's units ends the chain
  int input_features = 0;    // per sample, in global memory
  Epilogue input_epilogue;   // activations between the chain's input and the first dense layer
  int tile_images = 1;       // TM, a multiple of 4
  // Version 2: each layer's weights pass through shared memory in slices of slice_rows rows, two
  // buffers in turn (cp.async); 0: version 1, weights read through L1/L2 (layers whose slices do
  // not fit beside the activations).
  int staged_weights = 0;
  int slice_off[2] = {0, 0};
  int smem_floats = 0;
};

// The whole chain for one image per block (image_chain.cu), for batches too small to fill the GPU
// with the tiled kernels: the same layers and the same summation order per output (the same bits),
// finer work items, and no round trip through global memory between the two parts.
// Clusters: each layer's outputs reach the other blocks as asynchronous stores that complete on
// a per-layer mbarrier in the receiving block (image_team.cuh). A dense layer whose block units fit
// one warp's lanes and whose weights one slice sums each unit's chunks (DenseLayer::chunk_rows) on
// one warp per chunk, then adds them in order. The dense tail, in clusters whose blocks can each
// take one chunk of the last dense layer (tail_runs): the layer before it splits its units in
// runs of the last layer's chunk_rows, one per block; each block sums the last layer's chunk over
// its own run's outputs (a warp, values by shuffles) and sends that partial to block 0, which adds
// them in chunk order and runs the softmax: one hand-off of a few floats per block instead of every
// block's outputs to every block. The same sums in the same order as every other path.
struct ImageChainParams {
  int has_conv = 0, has_dense = 0;
  ConvChainParams conv;    // tile_images = 1; K*_2 / Generic2 variants; shared-memory offsets from 0
  DenseChainParams dense;  // tile_images = 1; in_off / out_off: one image's rows, after the conv part
  int slice_off[2] = {0, 0};  // two staged slices of dense weights, kImageSliceFloats each
  int acc_off = 0;            // [units_padded] running sums of the dense layer being computed
  int acc_chunk_off = 0;      // [units_padded] the unfinished chunk's partial sums (DenseLayer::chunk_rows)
  int partial_off = 0;        // [kImageThreads] chunk partials between a unit's warps (image_chain.cu)
  int tail_off = 0;           // [kImageMaxCluster][32] the last dense layer's chunk partials from the other blocks
  int bias_off[kMaxDenseLayers] = {};  // each dense layer's bias, staged with the conv weights at the start
  int smem_floats = 0;
  // Clusters of at least conv_split_blocks blocks: a conv layer's items are of one output channel
  // instead of kImageOcb (conv_tiled's OCU) when a block then has at most conv_split_items of them
  // (the plan's rule, plan_image_conv_setup; ImageChainOptions may change both, 0 items: never).
  // Same sums, same bits.
  int conv_split_items = kImageThreads;
  int conv_split_blocks = 8;
  // The first dense layer's input row is the last conv layer's output buffer itself (the plan's
  // choice where that buffer already is the flattened row, fused_plan.cpp); 0: the kernel copies it.
  int flatten_in_place = 0;
  // The cluster kernel (image_chain.cu): 0 the general one; K (2, 3, 5) the one specialised for
  // chains whose conv layers are all tiled K x K convolutions, 1 for chains without conv layers
  // (plan_image_cluster_kernel, fused_plan.cpp). The same code runs; the specialised kernels leave
  // out every other variant.
  int cluster_kernel = 0;
  // The dense tail's blocks in clusters of 2^s (image_tail_runs, fused_plan.cpp), 0: no tail there.
  int tail_runs[4] = {};
};

// Launchers (conv_chain.cu, dense_chain.cu, image_chain.cu). `blocks` is the persistent grid chosen at plan time;
// each block loops over tiles of images. Throw engine::gpu::CudaError naming `context`.
void conv_chain_prepare(int smem_bytes, const char* context);  // raises the kernel's shared-memory limit
int conv_chain_blocks_per_sm(int smem_bytes);
void conv_chain_forward(const ConvChainParams& p, const float* weights, const float* x, float* y, int n,
                        int blocks, cudaStream_t stream, const char* context);

void dense_chain_prepare(int smem_bytes, const char* context);
int dense_chain_blocks_per_sm(int smem_bytes);
void dense_chain_forward(const DenseChainParams& p, const float* x, float* y, int n, int blocks,
                         cudaStream_t stream, const char* context);

void image_chain_prepare(int smem_bytes, const char* context);
int image_chain_blocks_per_sm(int smem_bytes);
// How many clusters of `size` blocks of the image chain the device runs at once (0: it cannot
// launch that size). Clusters live inside one GPC, so this can be less than SMs / size (on a
// 132-SM GPU 16 clusters of 8 do not all fit: such a batch would take two waves).
int image_chain_cluster_capacity(int smem_bytes, int size);
// cluster > 1: n clusters of `cluster` blocks, one image each (n * cluster blocks, the caller keeps
// that within one wave); otherwise min(n, blocks) blocks looping over the images.
void image_chain_forward(const ImageChainParams& p, const float* conv_weights, const float* x, float* y, int n,
                         int blocks, int cluster, cudaStream_t stream, const char* context);

}  // namespace engine::custom::fused

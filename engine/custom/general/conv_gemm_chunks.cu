// The general path's GEMM with every K chunk of an output in the thread that owns it (large batches).
#include <string>

#include "engine/custom/general/conv_gemm_kernel.cuh"

namespace engine::custom::general::kernel {

void launch_chunks(const GemmArgs& a, GemmTile tile, int64_t M, cudaStream_t stream, const std::string& context) {
  launch_tile<Mode::Chunks>(a, tile, {}, M, stream, context);
}

}  // namespace engine::custom::general::kernel

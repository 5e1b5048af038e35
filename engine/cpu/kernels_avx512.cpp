// The kernels for AVX-512F (16 lanes). Compiled with -mavx512f -mavx2 -mfma (CMakeLists.txt); only
// called after the CPU was checked to have all three (cpu_backend.cpp).
#define ENGINE_CPU_AVX512 1
#define ENGINE_CPU_KERNEL_NS avx512
#include "engine/cpu/kernels.hpp"

namespace engine::cpu {

const KernelSet* kernels_avx512() {
  static const KernelSet set{Avx512::name, Avx512::W, &avx512::K<Avx512>::run_tile, &avx512::K<Avx512>::run_single,
                             &avx512::K<Avx512>::run_group,
                               &avx512::K<Avx512>::preprocess, &avx512::K<Avx512>::to_lanes,
                             avx512::K<Avx512>::kVectorPlanarStore};
  return &set;
}

}  // namespace engine::cpu

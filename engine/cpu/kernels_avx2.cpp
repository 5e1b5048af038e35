// The kernels for AVX2 + FMA (8 lanes). Compiled with -mavx2 -mfma (CMakeLists.txt); only called
// after the CPU was checked to have both (cpu_backend.cpp).
#define ENGINE_CPU_AVX2 1
#define ENGINE_CPU_KERNEL_NS avx2
#include "engine/cpu/kernels.hpp"

namespace engine::cpu {

const KernelSet* kernels_avx2() {
  static const KernelSet set{Avx2::name, Avx2::W, &avx2::K<Avx2>::run_tile, &avx2::K<Avx2>::run_single,
                             &avx2::K<Avx2>::run_group,
                               &avx2::K<Avx2>::preprocess, &avx2::K<Avx2>::to_lanes,
                             avx2::K<Avx2>::kVectorPlanarStore};
  return &set;
}

}  // namespace engine::cpu

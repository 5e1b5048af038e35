// The portable kernels: SSE2 (4 lanes, no FMA), which every x86-64 CPU has. Compiled without any
// -m flag.
#define ENGINE_CPU_SSE2 1
#define ENGINE_CPU_KERNEL_NS sse2
#include "engine/cpu/kernels.hpp"

namespace engine::cpu {

const KernelSet& kernels_portable() {
  static const KernelSet set{Sse2::name, Sse2::W, &sse2::K<Sse2>::run_tile, &sse2::K<Sse2>::run_single,
                             &sse2::K<Sse2>::run_group,
                               &sse2::K<Sse2>::preprocess, &sse2::K<Sse2>::to_lanes,
                             sse2::K<Sse2>::kVectorPlanarStore};
  return set;
}

}  // namespace engine::cpu

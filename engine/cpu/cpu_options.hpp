#pragma once
// Choices of the cpu backend that a caller may fix instead of leaving them to the backend. The
// defaults are the backend's own choices; the registry's "cpu" takes them from the environment
// (cpu_options_from_environment), tests pass them directly.
#include <memory>
#include <optional>
#include <string>

#include "engine/core/backend.hpp"

namespace engine::cpu {

struct CpuOptions {
  // The SIMD kernel set. Best: AVX-512F where the CPU has it, else AVX2 + FMA, else the portable
  // SSE2 ones. A set the CPU lacks is an error at compile(), not a crash. Training has an AVX2 and a
  // portable build (same bits): Portable picks the portable one, any other choice the AVX2 one where
  // the CPU has it.
  enum class Kernels { Best, Avx512, Avx2, Portable };
  Kernels kernels = Kernels::Best;
  // How a batch goes through the network (same bits either way, kernels.hpp). Tiles: lanes images
  // side by side, one per SIMD lane. Images: one image at a time, channels across the lanes, dense
  // layers for groups of images at once (a working set of one image rather than a tile's). Auto:
  // Images where a tile's largest zero-bordered conv input exceeds the L2 cache, or where every
  // conv runs across two or more vectors of channels with vector stores and the tile path copies
  // a padded input; else Tiles (the faster of the two on each model measured,
  // docs/design/cpu-backend.md); plan_summary() says which.
  enum class Schedule { Auto, Tiles, Images };
  Schedule schedule = Schedule::Auto;
};

// "avx512", "avx2", "portable"; std::nullopt for any other name.
std::optional<CpuOptions::Kernels> parse_kernels(const std::string& name);

// The operational setting ENGINE_CPU_KERNELS=avx512|avx2|portable (unset or empty: Best), as oneDNN's
// ONEDNN_MAX_CPU_ISA: lets a user force a lower instruction set (where the best one is slow or
// broken on a machine, or to compare the sets). Throws std::runtime_error on any other value. The
// one place the cpu backend reads the environment.
CpuOptions cpu_options_from_environment();

// The cpu backend with these choices; BackendRegistry's "cpu" is
// make_cpu_backend(cpu_options_from_environment()).
std::unique_ptr<Backend> make_cpu_backend(const CpuOptions& options = {});

}  // namespace engine::cpu

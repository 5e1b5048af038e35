#pragma once
// The fp32 FMA peak of the cores: what the cpu backend's kernels could reach at best, so that
// engine bench's "% of the CPU ceiling" means something.

namespace engine::bench {

// GFLOP/s (2 per lane per FMA) of `threads` threads each running independent FMA chains in the
// widest registers this CPU has (AVX-512F, else AVX2+FMA, else SSE2 multiply and add), enough chains
// to keep every FMA port busy through the instruction's latency; best of three runs of at least
// `seconds` of each thread's CPU time (not wall time: time slices of other processes do not count).
double cpu_fma_peak_gflops(int threads, double seconds);

// The instruction set cpu_fma_peak_gflops measured: "avx512f", "avx2+fma" or "sse2".
const char* cpu_fma_peak_isa();

}  // namespace engine::bench

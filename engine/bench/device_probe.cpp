// probe_device(): what the GPU is, and its two ceilings measured once: the fp32 FMA rate of a
// register-only kernel and the bandwidth of a large device-to-device copy (plus pinned host <->
// device copies for end-to-end scopes). Datasheet numbers are leads; these are what the fractions
// of ceiling in the reports divide by.
#include <fmt/format.h>

#include <algorithm>

#include "engine/bench/common.hpp"

#ifdef ENGINE_BENCH_WITH_CUDA
#include <cublas_v2.h>
#include <cudnn.h>

#include "engine/bench/probe_kernels.hpp"
#include "engine/gpu/buffers.hpp"
#include "engine/gpu/device.hpp"
#endif

namespace engine::bench {

#ifdef ENGINE_BENCH_WITH_CUDA
namespace {

std::string cuda_version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

// Best of `runs` timings (ms) of what `enqueue` puts on `stream`.
template <typename F>
double best_ms(cudaStream_t stream, int runs, F&& enqueue) {
  gpu::Event start, stop;
  enqueue();  // warm-up
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    start.record(stream);
    enqueue();
    stop.record(stream);
    CUDA_CHECK(cudaEventSynchronize(stop.get()));
    best = std::min(best, double(stop.since(start)));
  }
  return best;
}

}  // namespace
#endif

DeviceInfo probe_device(bool measure) {
  DeviceInfo d;
#ifndef ENGINE_BENCH_WITH_CUDA
  (void)measure;
  d.reason = "the engine was built without CUDA";
  return d;
#else
  if (auto why = gpu::no_gpu_reason()) {
    d.reason = *why;
    return d;
  }
  const gpu::DeviceInfo info = gpu::current_device();
  d.available = true;
  d.name = info.name;
  d.description = gpu::describe(info);
  d.cc_major = info.cc_major;
  d.cc_minor = info.cc_minor;
  d.multiprocessors = info.multiprocessors;
  d.memory_gib = double(info.global_memory) / double(1 << 30);
  d.driver = cuda_version_text(info.driver_version);
  d.runtime = cuda_version_text(info.runtime_version);
  const size_t cv = cudnnGetVersion();
  d.cudnn = fmt::format("{}.{}.{}", cv / 10000, (cv / 100) % 100, cv % 100);
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  d.cublas = fmt::format("{}.{}.{}", major, minor, patch);
  if (!measure) return d;

  gpu::Stream stream;
  {
    gpu::DeviceBuffer<float> sink(1024, "FMA probe output");
    const int blocks = d.multiprocessors * 8, threads = 256, iters = 1 << 15;
    const double ms =
        best_ms(stream.get(), 10, [&] { launch_fma_probe(sink.data(), blocks, threads, iters, stream.get()); });
    d.fma_tflops = 16.0 * double(iters) * blocks * threads / (ms * 1e-3) / 1e12;
  }
  {
    const size_t bytes = size_t(512) << 20;
    gpu::DeviceBuffer<unsigned char> a(bytes, "copy probe source"), b(bytes, "copy probe destination");
    CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, stream.get()));
    const double ms = best_ms(stream.get(), 10, [&] {
      CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    });
    d.copy_gbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  }
  {
    const size_t bytes = size_t(128) << 20;
    gpu::DeviceBuffer<unsigned char> dev(bytes, "link probe buffer");
    gpu::PinnedBuffer<unsigned char> host(bytes, "link probe buffer");
    std::fill(host.data(), host.data() + bytes, 1);
    const double h2d = best_ms(stream.get(), 5, [&] {
      CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream.get()));
    });
    const double d2h = best_ms(stream.get(), 5, [&] {
      CUDA_CHECK(cudaMemcpyAsync(host.data(), dev.data(), bytes, cudaMemcpyDeviceToHost, stream.get()));
    });
    d.h2d_gbps = double(bytes) / (h2d * 1e-3) / 1e9;
    d.d2h_gbps = double(bytes) / (d2h * 1e-3) / 1e9;
  }
  return d;
#endif
}

}  // namespace engine::bench

#include "engine/bench/ops_gpu.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#ifdef ENGINE_BENCH_WITH_CUDA
#include <cublas_v2.h>

#include "engine/custom/matrix_ops.hpp"
#include "engine/gpu/buffers.hpp"
#include "engine/gpu/device.hpp"
#endif

namespace engine::bench {

#ifndef ENGINE_BENCH_WITH_CUDA

std::optional<std::string> gpu_ops_unavailable() { return std::string("the engine was built without CUDA"); }
std::unique_ptr<GpuOps> make_gpu_ops() { throw std::logic_error("the engine was built without CUDA"); }

#else

namespace {

void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuBLAS: {} failed: {}", what, cublasGetStatusString(status)));
}

class CudaOps final : public GpuOps {
 public:
  CudaOps() : workspace_(size_t(32) << 20, "cuBLAS workspace") {
    CUDA_CHECK(cudaGetDevice(&device_));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device_));
    cublas_check(cublasCreate(&handle_), "cublasCreate");
    cublas_check(cublasSetStream(handle_, stream_.get()), "cublasSetStream");
    // After the stream: cublasSetStream resets the workspace. FP32 math (no TF32).
    cublas_check(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
    cublas_check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  ~CudaOps() override {
    cudaStreamSynchronize(stream_.get());
    if (handle_) cublasDestroy(handle_);
  }

  void prepare(const std::string& op, int n, const float* a, const float* b) override {
    op_ = op;
    n_ = n;
    const size_t count = size_t(n) * size_t(n);
    if (count != count_) {
      a_ = {};
      b_ = {};
      c_ = {};
      ha_ = {};
      hb_ = {};
      hc_ = {};
      a_ = gpu::DeviceBuffer<float>(count, "matrix a");
      b_ = gpu::DeviceBuffer<float>(count, "matrix b");
      c_ = gpu::DeviceBuffer<float>(count, "matrix c");
      ha_ = gpu::PinnedBuffer<float>(count, "matrix a");
      hb_ = gpu::PinnedBuffer<float>(count, "matrix b");
      hc_ = gpu::PinnedBuffer<float>(count, "matrix c");
      count_ = count;
    }
    std::copy(a, a + count, ha_.data());
    std::copy(b, b + count, hb_.data());
    CUDA_CHECK(cudaMemcpyAsync(a_.data(), ha_.data(), count * 4, cudaMemcpyHostToDevice, stream_.get()));
    CUDA_CHECK(cudaMemcpyAsync(b_.data(), hb_.data(), count * 4, cudaMemcpyHostToDevice, stream_.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  GpuOpRun time(const std::string& impl, Launch3 grid, Launch3 block, bool transfers, double min_ms,
                int min_iterations) override {
    cudaStream_t s = stream_.get();
    const size_t bytes = count_ * 4;
    auto enqueue = [&] {
      if (transfers) {
        CUDA_CHECK(cudaMemcpyAsync(a_.data(), ha_.data(), bytes, cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(b_.data(), hb_.data(), bytes, cudaMemcpyHostToDevice, s));
      }
      kernel(impl, grid, block);
      if (transfers) CUDA_CHECK(cudaMemcpyAsync(hc_.data(), c_.data(), bytes, cudaMemcpyDeviceToHost, s));
    };
    CUDA_CHECK(cudaMemsetAsync(c_.data(), 0xFF, bytes, s));  // NaN: an unwritten element shows
    enqueue();                                               // warm-up (cuBLAS loads its kernels)
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<double> samples;
    gpu::Event start, stop;
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      start.record(s);
      enqueue();
      stop.record(s);
      CUDA_CHECK(cudaEventSynchronize(stop.get()));
      samples.push_back(stop.since(start));
      const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (elapsed >= min_ms && (int(samples.size()) >= min_iterations || elapsed >= 2000)) break;
      if (samples.size() >= 100000) break;
    }
    GpuOpRun r;
    r.ms = summarize(samples, {90});
    r.iterations = int(samples.size());
    r.c.resize(count_);
    CUDA_CHECK(cudaMemcpyAsync(hc_.data(), c_.data(), bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::copy(hc_.data(), hc_.data() + count_, r.c.begin());
    return r;
  }

  int multiprocessors() const override { return sms_; }
  Launch3 tiled_grid() const override {
    const dim3 g = op_ == "add" ? custom::matrix_add_tiled_grid(n_, n_) : custom::matrix_multiply_tiled_grid(n_, n_);
    return Launch3{g.x, g.y, g.z};
  }
  Launch3 tiled_block() const override {
    return op_ == "add" ? Launch3{unsigned(custom::kMatrixAddTile), unsigned(custom::kMatrixAddTileRows), 1}
                        : Launch3{unsigned(custom::kMatrixTile), unsigned(custom::kMatrixTile), 1};
  }

 private:
  void kernel(const std::string& impl, Launch3 grid, Launch3 block) {
    cudaStream_t s = stream_.get();
    const dim3 g(grid.x, grid.y, grid.z), b(block.x, block.y, block.z);
    const int n = n_;
    if (impl == "naive") {
      if (op_ == "add")
        custom::matrix_add_naive(a_.data(), b_.data(), c_.data(), n, n, g, b, s);
      else
        custom::matrix_multiply_naive(a_.data(), b_.data(), c_.data(), n, n, n, g, b, s);
    } else if (impl == "tiled") {
      if (op_ == "add")
        custom::matrix_add_tiled(a_.data(), b_.data(), c_.data(), n, n, s, g);
      else
        custom::matrix_multiply_tiled(a_.data(), b_.data(), c_.data(), n, n, n, s, g);
    } else if (impl == "cublas") {
      const float one = 1.0f, zero = 0.0f;
      // Row-major C = A B is column-major C^T = B^T A^T: the same call with A and B swapped.
      if (op_ == "add")
        cublas_check(
            cublasSgeam(handle_, CUBLAS_OP_N, CUBLAS_OP_N, n, n, &one, a_.data(), n, &one, b_.data(), n, c_.data(), n),
            "cublasSgeam");
      else
        cublas_check(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b_.data(), n, a_.data(), n, &zero,
                                 c_.data(), n),
                     "cublasSgemm");
    } else {
      throw std::invalid_argument("unknown GPU implementation " + impl);
    }
  }

  int device_ = 0, sms_ = 1;
  gpu::Stream stream_;
  gpu::DeviceBuffer<unsigned char> workspace_;
  cublasHandle_t handle_ = nullptr;
  std::string op_;
  int n_ = 0;
  size_t count_ = 0;
  gpu::DeviceBuffer<float> a_, b_, c_;
  gpu::PinnedBuffer<float> ha_, hb_, hc_;
};

}  // namespace

std::optional<std::string> gpu_ops_unavailable() { return gpu::no_gpu_reason(); }
std::unique_ptr<GpuOps> make_gpu_ops() { return std::make_unique<CudaOps>(); }

#endif

}  // namespace engine::bench

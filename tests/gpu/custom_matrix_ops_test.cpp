// engine/custom/matrix_ops: the seed's matrix add and multiply kernels, naive and tiled, against a
// CPU loop, for odd and non-square sizes and several launch shapes (gridDim = 1 included).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/custom/matrix_ops.hpp"
#include "engine/gpu/buffers.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/custom_test_util.hpp"

namespace {

using engine::gpu::DeviceBuffer;
using engine::gpu::Stream;

DeviceBuffer<float> to_device(const std::vector<float>& host, const std::string& what) {
  DeviceBuffer<float> d(host.size(), what);
  CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

// A NaN-filled device buffer: an element the kernel does not write stays NaN.
DeviceBuffer<float> poisoned(size_t count, const std::string& what) {
  DeviceBuffer<float> d(count, what);
  CUDA_CHECK(cudaMemset(d.data(), 0xFF, d.bytes()));
  // cudaMemset runs on the legacy default stream, which does not order with the test's
  // non-blocking stream: wait for it, or the poison can land after the kernel's results.
  CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

std::vector<float> to_host(const DeviceBuffer<float>& d, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> host(d.size());
  CUDA_CHECK(cudaMemcpy(host.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

std::string shape_text(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

struct Launch {
  dim3 grid, block;
};

// Naive launch shapes: gridDim = 1, one thread, fewer blocks/threads than rows/columns, 2-D and
// 3-D shapes, more blocks than rows.
std::vector<Launch> naive_launches(int rows) {
  return {{dim3(1), dim3(1)},        {dim3(1), dim3(32)},         {dim3(1), dim3(1024)},
          {dim3(7), dim3(64)},       {dim3(unsigned(rows)), dim3(256)}, {dim3(2, 3, 1), dim3(8, 4, 2)},
          {dim3(unsigned(rows) + 5), dim3(33)}};
}

struct Size2 {
  int rows, cols;
};
struct Size3 {
  int m, k, n;
};

TEST(CustomMatrixOps, AddNaiveAndTiledMatchCpuExactly) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  Stream stream;
  std::vector<Size2> sizes = {{1, 1}, {7, 13}, {33, 65}, {1000, 3}, {3, 1000}};
  if (!custom_test::sanitizer_run()) sizes.push_back({513, 1025});
  uint32_t seed = 1;
  for (const auto& s : sizes) {
    const size_t count = size_t(s.rows) * s.cols;
    const auto a = testing_support::random_floats(count, seed++), b = testing_support::random_floats(count, seed++);
    std::vector<float> expected(count);
    for (size_t i = 0; i < count; ++i) expected[i] = a[i] + b[i];  // one correctly rounded float add, as on the GPU
    auto da = to_device(a, "a"), db = to_device(b, "b");
    const std::string size_text = std::to_string(s.rows) + "x" + std::to_string(s.cols);

    for (const Launch& l : naive_launches(s.rows)) {
      auto dc = poisoned(count, "c");
      engine::custom::matrix_add_naive(da.data(), db.data(), dc.data(), s.rows, s.cols, l.grid, l.block, stream.get());
      const auto c = to_host(dc, stream.get());
      EXPECT_EQ(std::memcmp(c.data(), expected.data(), count * sizeof(float)), 0)
          << "matrix_add_naive " << size_text << " grid " << shape_text(l.grid) << " block " << shape_text(l.block);
    }
    for (dim3 grid : {dim3(0, 0), dim3(1, 1), dim3(3, 2)}) {
      auto dc = poisoned(count, "c");
      engine::custom::matrix_add_tiled(da.data(), db.data(), dc.data(), s.rows, s.cols, stream.get(), grid);
      const auto c = to_host(dc, stream.get());
      EXPECT_EQ(std::memcmp(c.data(), expected.data(), count * sizeof(float)), 0)
          << "matrix_add_tiled " << size_text << " grid " << shape_text(grid);
    }
  }
}

// c = a * b: float accumulation on the GPU against a double loop on the CPU, with the rigorous
// bound of a k-term float dot product: |error| <= k * 2^-24 * sum |a_ip b_pj| (doubled for margin).
void expect_product(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c, const Size3& s,
                    const std::string& what) {
  size_t bad = 0;
  std::string first_bad;
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      double ref = 0, mag = 0;
      for (int p = 0; p < s.k; ++p) {
        const double t = double(a[size_t(i) * s.k + p]) * double(b[size_t(p) * s.n + j]);
        ref += t;
        mag += std::fabs(t);
      }
      const double got = c[size_t(i) * s.n + j];
      const double tol = 2.0 * (s.k + 1) * std::ldexp(1.0, -24) * mag + 1e-30;
      if (!(std::fabs(got - ref) <= tol)) {  // also catches NaN (unwritten)
        if (bad++ == 0)
          first_bad = "c[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(got) +
                      ", expected " + std::to_string(ref);
      }
    }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " wrong elements, first " << first_bad;
}

TEST(CustomMatrixOps, MultiplyNaiveAndTiledMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  Stream stream;
  std::vector<Size3> sizes = {{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {64, 64, 64}, {100, 300, 37}, {1, 1000, 3}};
  if (!custom_test::sanitizer_run()) sizes.push_back({257, 129, 513});
  uint32_t seed = 100;
  for (const auto& s : sizes) {
    const auto a = testing_support::random_floats(size_t(s.m) * s.k, seed++);
    const auto b = testing_support::random_floats(size_t(s.k) * s.n, seed++);
    auto da = to_device(a, "a"), db = to_device(b, "b");
    const size_t count = size_t(s.m) * s.n;
    const std::string size_text = std::to_string(s.m) + "x" + std::to_string(s.k) + " * " + std::to_string(s.k) +
                                  "x" + std::to_string(s.n);
    for (const Launch& l : naive_launches(s.m)) {
      auto dc = poisoned(count, "c");
      engine::custom::matrix_multiply_naive(da.data(), db.data(), dc.data(), s.m, s.k, s.n, l.grid, l.block,
                                            stream.get());
      expect_product(a, b, to_host(dc, stream.get()), s,
                     "matrix_multiply_naive " + size_text + " grid " + shape_text(l.grid) + " block " +
                         shape_text(l.block));
    }
    for (dim3 grid : {dim3(0, 0), dim3(1, 1), dim3(2, 3)}) {
      auto dc = poisoned(count, "c");
      engine::custom::matrix_multiply_tiled(da.data(), db.data(), dc.data(), s.m, s.k, s.n, stream.get(), grid);
      expect_product(a, b, to_host(dc, stream.get()), s, "matrix_multiply_tiled " + size_text + " grid " + shape_text(grid));
    }
  }
}

// A launch shape the device rejects is reported at once, naming the kernel.
TEST(CustomMatrixOps, InvalidLaunchShapeThrows) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  Stream stream;
  auto a = poisoned(4, "a");
  try {
    engine::custom::matrix_add_naive(a.data(), a.data(), a.data(), 2, 2, dim3(1), dim3(2048), stream.get());
    FAIL() << "a 2048-thread block was accepted";
  } catch (const engine::gpu::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("matrix_add_naive"), std::string::npos) << e.what();
  }
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));  // the error was not sticky: the stream still works
}

}  // namespace

// Several executables of one model driven as one (engine/core/multi_device.hpp) on the GPU backends:
// two executables on GPU 0 (runs on any GPU host) and on GPUs 0 and 1 (skipped with fewer), against
// one executable on the same batches, bit for bit; executables bound to a device whatever device the
// calling thread has current; a device index that does not exist.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/multi_device.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"
#include "tests/gpu/gpu_op_test_util.hpp"

namespace {

using gpu_test::visible_gpus;

struct SplitCase {
  std::string backend;
  bool fuse;
  bool pinned;
  int second_device;  // the second part's GPU: 0 (two executables on one GPU) or 1
};

void PrintTo(const SplitCase& c, std::ostream* os) {
  *os << c.backend << (c.fuse ? "" : "_per_node") << (c.pinned ? "_pinned" : "_staged") << "_gpus_0_" << c.second_device;
}

class MultiDeviceSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(MultiDeviceSplit, SameBitsAsOneExecutable) {
  const SplitCase sc = GetParam();
  ENGINE_SKIP_UNLESS_BACKEND(sc.backend);
  if (visible_gpus() <= sc.second_device)
    GTEST_SKIP() << "needs " << sc.second_device + 1 << " GPUs; " << visible_gpus() << " visible here";
  auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 64;
  options.fuse = sc.fuse;
  auto backend = engine::BackendRegistry::instance().create(sc.backend);
  options.device = 0;
  auto single = backend->compile(graph, options);
  std::vector<std::unique_ptr<engine::Executable>> parts;
  parts.push_back(backend->compile(graph, options));
  options.device = sc.second_device;
  parts.push_back(backend->compile(graph, options));
  engine::MultiDeviceExecutable multi(std::move(parts), {"GPU 0", "GPU " + std::to_string(sc.second_device)});
  EXPECT_NE(multi.execution_path().find("on 2 devices"), std::string::npos) << multi.execution_path();

  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const int64_t classes = graph.output_elements(0);
  const int64_t elements[] = {classes};
  const auto pixels = testing_support::random_bytes(per_sample * size_t(9 * 48 + 13), 4242u);
  // The second part finds the memory registered by the first and uses it as is.
  if (sc.pinned) ASSERT_TRUE(multi.pin_host_input(pixels.data(), pixels.size()));
  for (const int64_t count : {int64_t(9 * 48 + 13), int64_t(48), int64_t(5), int64_t(2 * 48 + 1)}) {
    for (const int batch : {48, 64}) {
      SCOPED_TRACE(testing::Message() << count << " images in batches of " << batch);
      std::vector<float> expected(size_t(classes * count)), got(expected.size(), std::numeric_limits<float>::quiet_NaN());
      float* e_out[] = {expected.data()};
      float* g_out[] = {got.data()};
      single->run_batches(engine::BatchStream{pixels.data(), per_sample, count, batch, e_out, elements});
      multi.run_batches(engine::BatchStream{pixels.data(), per_sample, count, batch, g_out, elements});
      const size_t first_diff = testing_support::first_bit_difference(got, expected);
      ASSERT_EQ(first_diff, got.size()) << "first different element " << first_diff << " (sample "
                                        << first_diff / size_t(classes) << ")";
    }
  }
  ASSERT_TRUE(multi.last_timings().has_value());
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, MultiDeviceSplit,
    ::testing::Values(SplitCase{"custom", true, true, 0}, SplitCase{"custom", true, false, 0},
                      SplitCase{"custom", false, true, 0}, SplitCase{"cudnn", true, true, 0},
                      SplitCase{"cudnn", true, false, 0}, SplitCase{"custom", true, true, 1},
                      SplitCase{"custom", false, false, 1}, SplitCase{"cudnn", true, true, 1}),
    [](const ::testing::TestParamInfo<SplitCase>& info) {
      return info.param.backend + (info.param.fuse ? "" : "_per_node") + (info.param.pinned ? "_pinned" : "_staged") +
             "_gpus_0_" + std::to_string(info.param.second_device);
    });

class DeviceBinding : public ::testing::TestWithParam<std::string> {};

// Compiled for the last GPU, called from threads whose current device is another (or never set):
// every call switches to the executable's GPU and back.
TEST_P(DeviceBinding, CallsRunOnTheBoundDeviceAndRestoreTheCallersDevice) {
  ENGINE_SKIP_UNLESS_BACKEND(GetParam());
  const int gpus = visible_gpus();
  auto backend = engine::BackendRegistry::instance().create(GetParam());
  EXPECT_EQ(int(backend->devices().size()), gpus);
  auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 8;
  options.device = gpus - 1;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto exe = backend->compile(graph, options);
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const auto pixels = testing_support::random_bytes(per_sample * 8, 5u);
  std::vector<float> a(size_t(graph.output_elements(0)) * 8), b(a.size());
  float* a_out[] = {a.data()};
  exe->run(pixels.data(), 8, a_out);
  std::thread other([&] {
    float* b_out[] = {b.data()};
    exe->run(pixels.data(), 8, b_out);  // a fresh thread: its current device is 0 until set
  });
  other.join();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  // Time points made by it belong to its device too.
  engine::StagedExecution* staged = exe->staged_execution();
  ASSERT_NE(staged, nullptr);
  auto t0 = staged->make_time_point(), t1 = staged->make_time_point();
  t0->record();
  staged->stage_input(pixels.data(), 8);
  staged->compute(8);
  t1->record();
  EXPECT_GE(t1->ms_since(*t0), 0.0);
  exe.reset();  // destroyed on its device, from device 0
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
}

TEST_P(DeviceBinding, ADeviceThatDoesNotExistIsAClearError) {
  ENGINE_SKIP_UNLESS_BACKEND(GetParam());
  auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 8;
  options.device = visible_gpus();
  auto backend = engine::BackendRegistry::instance().create(GetParam());
  try {
    backend->compile(graph, options);
    FAIL() << "compiled for GPU " << options.device;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("GPU " + std::to_string(options.device) + " does not exist"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, DeviceBinding, ::testing::Values("custom", "cudnn"));

}  // namespace

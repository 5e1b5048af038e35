// Why no GPU is usable, in words a new user understands (engine/gpu/device.cpp). These tests need no
// GPU: they feed explain_no_gpu the codes cudaGetDeviceCount returns on machines without one, and
// check no_gpu_reason() against whatever this machine is.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/gpu/device.hpp"

namespace {

using engine::gpu::explain_no_gpu;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(NoGpuReason, NoDriverSaysSoNotAVersionProblem) {
  // What cudaGetDeviceCount says when no driver is installed: the driver version reads 0.
  EXPECT_EQ(explain_no_gpu(cudaErrorInsufficientDriver, 0, nullptr),
            "no usable NVIDIA GPU: no CUDA driver found (cudaGetDeviceCount: CUDA driver version is insufficient for "
            "CUDA runtime version)");
  EXPECT_EQ(explain_no_gpu(cudaErrorStubLibrary, 0, nullptr).rfind("no usable NVIDIA GPU: no CUDA driver found", 0),
            0u);
}

TEST(NoGpuReason, AnOldDriverIsNamedWithBothVersions) {
  int runtime = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&runtime), cudaSuccess);
  const std::string why = explain_no_gpu(cudaErrorInsufficientDriver, 11040, nullptr);
  EXPECT_TRUE(contains(why, "the NVIDIA driver supports CUDA up to 11.4")) << why;
  EXPECT_TRUE(contains(why, "this build needs CUDA " + std::to_string(runtime / 1000) + "." +
                                std::to_string(runtime % 1000 / 10) + ": update the driver"))
      << why;
}

TEST(NoGpuReason, NoDeviceMentionsCudaVisibleDevicesOnlyWhenSet) {
  EXPECT_EQ(explain_no_gpu(cudaErrorNoDevice, 12080, nullptr),
            "no usable NVIDIA GPU: the CUDA driver finds no GPU (cudaGetDeviceCount: no CUDA-capable device is "
            "detected)");
  EXPECT_TRUE(contains(explain_no_gpu(cudaErrorNoDevice, 12080, ""), "no GPU visible (CUDA_VISIBLE_DEVICES='')"));
}

TEST(NoGpuReason, OtherFailuresKeepCudasWords) {
  const std::string why = explain_no_gpu(cudaErrorUnknown, 12080, nullptr);
  EXPECT_EQ(why.rfind("no usable NVIDIA GPU: ", 0), 0u) << why;
  EXPECT_TRUE(contains(why, std::string("(cudaGetDeviceCount: ") + cudaGetErrorString(cudaErrorUnknown) + ")")) << why;
}

TEST(NoGpuReason, ThisMachine) {
  // With a GPU there is no reason; without one, the reason is worded as above.
  int count = 0;
  const bool gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  const auto why = engine::gpu::no_gpu_reason();
  EXPECT_EQ(gpu, !why.has_value());
  if (why) EXPECT_EQ(why->rfind("no usable NVIDIA GPU: ", 0), 0u) << *why;
}

}  // namespace

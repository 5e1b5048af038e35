// A/B of the cudnn backend's choices per precision (int8, fp16, fp32): the storage layout
// (CudnnOptions::layout) and the dense path (CudnnOptions::dense: cuBLASLt with the fused epilogue or
// cublasGemmEx), the product's defaults against the others. Each variant is one executable timed
// over 20 forward passes of MODEL at BATCH from device input (zeros; outputs downloaded), CUDA graph
// replay on; the default variant's plan summary is printed (int8 convolutions list their tactics'
// times). Not shipped; built by dev/cudnn/build_ab.sh.
//   usage: options_ab CALIBRATED_MODEL.json BATCH
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/cudnn/cudnn_options.hpp"
#include "formats/model_loader.hpp"

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: %s MODEL.json BATCH\n", argv[0]), 2;
  auto model = std::make_shared<const formats::Model>(formats::load_model(argv[1]));
  const int batch = std::stoi(argv[2]);
  const engine::Graph graph = engine::plan_graph(model);
  const auto& in = model->input;
  const size_t sample = size_t(formats::element_count(in.raw_shape)) * (in.dtype == formats::InputDType::UInt8 ? 1 : 4);
  void* dev = nullptr;
  if (cudaMalloc(&dev, sample * size_t(batch)) != cudaSuccess || cudaMemset(dev, 0, sample * size_t(batch)) != cudaSuccess)
    return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
  std::vector<float> out(size_t(graph.output_elements(0)) * size_t(batch));
  float* outs[] = {out.data()};
  using Options = engine::cudnn::CudnnOptions;
  struct Variant {
    const char* name;
    Options options;
  };
  std::vector<Variant> variants = {{"defaults", {}}};
  for (auto [name, layout] : {std::pair{"layout nchw", Options::Layout::Nchw}, {"layout nhwc", Options::Layout::Nhwc}}) {
    Options o;
    o.layout = layout;
    variants.push_back({name, o});
  }
  Options gemm;
  gemm.dense = Options::Dense::Gemm;
  variants.push_back({"dense cublasGemmEx", gemm});
  for (auto p : {engine::Precision::INT8, engine::Precision::FP16, engine::Precision::FP32})
    for (const auto& v : variants) {
      engine::CompileOptions c;
      c.max_batch = batch;
      c.precision = p;
      try {
        auto exe = engine::cudnn::make_cudnn_backend(v.options)->compile(graph, c);
        exe->use_graph_replay(true);
        std::vector<double> ms;
        for (int i = 0; i < 23; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          exe->run_device_input(dev, batch, outs);
          if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        std::printf("%s %s: %.3f ms median, %.2f M images/s (outputs downloaded)\n", engine::precision_name(p), v.name,
                    ms[ms.size() / 2], batch / ms[ms.size() / 2] / 1e3);
        if (&v == &variants.front()) std::printf("%s\n", exe->plan_summary().c_str());
      } catch (const std::exception& e) {
        std::printf("%s %s: %s\n", engine::precision_name(p), v.name, e.what());
      }
      std::fflush(stdout);
    }
  cudaFree(dev);
  return 0;
}

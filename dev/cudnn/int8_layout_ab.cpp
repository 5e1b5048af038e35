// A/B of the cudnn backend's storage layout per precision (CudnnOptions::layout), the product's
// default against the others: the median of 20 forward passes of MODEL at BATCH on preprocessed-free
// device input (uint8 or float, zeros), one executable per variant, and each plan's summary (the
// int8 convolutions list their tactics' times). Not shipped; built by dev/cudnn/build_ab.sh.
//   usage: int8_layout_ab CALIBRATED_MODEL.json BATCH
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
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
  using L = engine::cudnn::CudnnOptions::Layout;
  for (auto p : {engine::Precision::INT8, engine::Precision::FP16, engine::Precision::FP32})
    for (auto layout : {L::Auto, L::Nchw, L::Nhwc}) {
      engine::cudnn::CudnnOptions o;
      o.layout = layout;
      engine::CompileOptions c;
      c.max_batch = batch;
      c.precision = p;
      try {
        auto exe = engine::cudnn::make_cudnn_backend(o)->compile(graph, c);
        exe->use_graph_replay(true);
        std::vector<double> ms;
        for (int i = 0; i < 23; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          exe->run_device_input(dev, batch, outs);
          if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        std::printf("%s layout %s: %.3f ms median, %.2f M images/s (incl. download)\n", engine::precision_name(p),
                    layout == L::Auto ? "auto" : layout == L::Nchw ? "nchw" : "nhwc", ms[ms.size() / 2],
                    batch / ms[ms.size() / 2] / 1e3);
        if (layout == L::Auto) std::printf("%s\n", exe->plan_summary().c_str());
        std::fflush(stdout);
      } catch (const std::exception& e) {
        std::printf("%s layout %d: %s\n", engine::precision_name(p), int(layout), e.what());
      }
    }
  cudaFree(dev);
  return 0;
}

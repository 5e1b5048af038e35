// A/B of the custom backend's fp32 paths per model and batch: VARIANTS, comma-separated, each
// "fused" (the fused chain forced where the graph qualifies), "general" (the general path forced,
// GeneralOptions::over_fused_chain), "general/sN" (the general path with K chunks of at least N
// steps, GeneralOptions::min_chunk_steps) or "general/sNbM" (and M blocks at batch 1 as the chunk
// target, GeneralOptions::chunk_target_blocks); "general/r": the general path with the dense 16-byte row
// copies (GeneralOptions::dense_row_copies).
// Each variant is one executable compiled for BATCH, timed over 30 CUDA-graph replays (7 at 65,536
// and above) of a forward pass from device input (zeros, uint8 or float as the model takes), outputs
// downloaded to pinned memory; the general variant's plan summary is printed once per model. Not
// shipped; built by build_ab.sh.
//   usage: general_ab BATCHES VARIANTS MODEL.json...   (BATCHES: comma-separated)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/custom/custom_backend.hpp"
#include "formats/model_loader.hpp"

int main(int argc, char** argv) {
  if (argc < 4) return std::fprintf(stderr, "usage: %s BATCHES VARIANTS MODEL.json...\n", argv[0]), 2;
  std::vector<int> batches;
  {
    std::stringstream ss(argv[1]);
    for (std::string b; std::getline(ss, b, ',');) batches.push_back(std::stoi(b));
  }
  std::vector<std::string> variants;
  {
    std::stringstream ss(argv[2]);
    for (std::string v; std::getline(ss, v, ',');) variants.push_back(v);
  }
  for (int mi = 3; mi < argc; ++mi) {
    auto model = std::make_shared<const formats::Model>(formats::load_model(argv[mi]));
    const engine::Graph graph = engine::plan_graph(model);
    const auto& in = model->input;
    const size_t sample =
        size_t(formats::element_count(in.raw_shape)) * (in.dtype == formats::InputDType::UInt8 ? 1 : 4);
    bool printed = false;
    for (int batch : batches) {
      void* dev = nullptr;
      if (cudaMalloc(&dev, sample * size_t(batch)) != cudaSuccess ||
          cudaMemset(dev, 0, sample * size_t(batch)) != cudaSuccess)
        return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
      float* out = nullptr;  // pinned: the download is not what is measured
      if (cudaMallocHost(reinterpret_cast<void**>(&out), size_t(graph.output_elements(0)) * size_t(batch) * sizeof(float)) != cudaSuccess)
        return std::fprintf(stderr, "cudaMallocHost failed\n"), 1;
      float* outs[] = {out};
      for (const std::string& variant : variants) {
        const bool general = variant != "fused";
        const char* name = variant.c_str();
        engine::custom::CustomOptions o;
        o.general.over_fused_chain = general;
        if (variant == "general/r") o.general.dense_row_copies = true;
        if (variant.rfind("general/s", 0) == 0) {  // general/sN or general/sNbM
          const size_t b = variant.find('b', 9);
          o.general.min_chunk_steps = std::stoi(variant.substr(9, b == std::string::npos ? std::string::npos : b - 9));
          if (b != std::string::npos) o.general.chunk_target_blocks = std::stoi(variant.substr(b + 1));
        }
        engine::CompileOptions c;
        c.max_batch = batch;
        try {
          auto exe = engine::custom::make_custom_backend(o)->compile(graph, c);
          if (!general && exe->execution_path().rfind("general", 0) == 0) {
            std::printf("%s batch %d fused: not taken\n", model->name.c_str(), batch);
            continue;
          }
          exe->use_graph_replay(true);
          std::vector<double> ms;
          const int runs = batch >= 65536 ? 10 : 33;
          for (int i = 0; i < runs; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            exe->run_device_input(dev, batch, outs);
            if (i >= 3)
              ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          }
          std::sort(ms.begin(), ms.end());
          const double med = ms[ms.size() / 2];
          std::printf("%s batch %d %s: %.4f ms median, %.4g images/s  [%s]\n", model->name.c_str(), batch,
                      name, med, batch / med * 1e3, exe->execution_path().substr(0, 60).c_str());
          if (general && !printed && batch > 1) std::printf("%s\n", exe->plan_summary().c_str()), printed = true;
        } catch (const std::exception& e) {
          std::printf("%s batch %d %s: %s\n", model->name.c_str(), batch, name, e.what());
        }
        std::fflush(stdout);
      }
      cudaFree(dev);
      cudaFreeHost(out);
    }
  }
  return 0;
}

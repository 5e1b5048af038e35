// Thread-CPU-time benchmark of the cpu backend's int8 path against its fp32 path, one thread: robust
// on a shared machine where wall time includes other processes' time slices. Prints, per batch,
// images per CPU-second (median of 7 timings of about 0.2 s) at fp32 and int8, and their ratio.
//   dev/cpu/int8/build.sh && /tmp/int8_time CALIBRATED_MODEL.json [batches=1,64,1024] [kernels=best|avx2|portable]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "formats/model_loader.hpp"

using namespace engine;

// Images per thread-CPU-second: the median of 7 timings of as many calls as take about 0.2 s.
static double images_per_second(Executable& exe, const void* input, int n, std::vector<float*>& outputs) {
  auto cpu_seconds = [] {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  double start = cpu_seconds();
  exe.run(input, n, outputs);
  const int calls = std::max(1, int(0.2 / std::max(1e-7, cpu_seconds() - start)));
  std::vector<double> per_call;
  for (int rep = 0; rep < 7; ++rep) {
    start = cpu_seconds();
    for (int c = 0; c < calls; ++c) exe.run(input, n, outputs);
    per_call.push_back((cpu_seconds() - start) / calls);
  }
  std::nth_element(per_call.begin(), per_call.begin() + 3, per_call.end());
  return n / per_call[3];
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::vector<int> batches;  // "1,64,1024"
  for (const char* list = argc > 2 ? argv[2] : "1,64,1024"; *list;) {
    char* end = nullptr;
    batches.push_back(int(std::strtol(list, &end, 10)));
    list = *end == ',' ? end + 1 : end;
    if (end == list && *list) return 2;  // not a number
  }
  cpu::CpuOptions options;
  if (argc > 3) options.kernels = *cpu::parse_kernels(argv[3]);
  auto model = std::make_shared<const formats::Model>(formats::load_model(argv[1]));
  const Graph graph = plan_graph(model);
  const int64_t raw = formats::element_count(model->input.raw_shape);
  const bool floats = model->input.dtype == formats::InputDType::Float32;
  std::mt19937 rng(1);
  auto backend = cpu::make_cpu_backend(options);
  for (int n : batches) {
    std::vector<uint8_t> bytes(size_t(raw) * size_t(n) * (floats ? 4 : 1));
    if (floats) {
      std::uniform_real_distribution<float> d(-2.0f, 2.0f);
      auto* f = reinterpret_cast<float*>(bytes.data());
      for (int64_t i = 0; i < raw * n; ++i) f[i] = d(rng);
    } else {
      for (auto& v : bytes) v = uint8_t(rng() & 255);
    }
    std::vector<std::vector<float>> out;
    std::vector<float*> ptrs;
    for (size_t i = 0; i < graph.outputs.size(); ++i) out.emplace_back(size_t(graph.output_elements(i)) * size_t(n));
    for (auto& v : out) ptrs.push_back(v.data());
    double rate[2];
    for (int p = 0; p < 2; ++p) {
      CompileOptions co;
      co.max_batch = n;
      co.threads = 1;
      co.precision = p == 0 ? Precision::FP32 : Precision::INT8;
      auto exe = backend->compile(graph, co);
      rate[p] = images_per_second(*exe, bytes.data(), n, ptrs);
    }
    std::printf("%-20s batch %5d  fp32 %9.0f  int8 %9.0f img/s  int8/fp32 %.2f\n", model->name.c_str(), n, rate[0],
                rate[1], rate[1] / rate[0]);
  }
}

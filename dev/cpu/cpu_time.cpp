// Thread-CPU-time benchmark of the cpu backend, one thread: robust on a shared machine where wall
// time includes other processes' time slices. Prints, per batch, images per CPU-second (best of
// --reps repetitions of --calls calls) for both schedules (tiles, images).
//   dev/cpu/build_cpu_time.sh && /tmp/cpu_time MODEL.json [batches=1,64,1024] [kernels=best|avx2|portable]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cpu/cpu_options.hpp"
#include "formats/model_loader.hpp"
#include "engine/core/graph.hpp"

using namespace engine;

static double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::vector<int> batches{1, 64, 1024};
  if (argc > 2) {
    batches.clear();
    std::stringstream ss(argv[2]);
    for (std::string b; std::getline(ss, b, ',');) batches.push_back(std::stoi(b));
  }
  cpu::CpuOptions base;
  if (argc > 3 && std::string(argv[3]) != "best") base.kernels = *cpu::parse_kernels(argv[3]);
  auto model = std::make_shared<const formats::Model>(formats::load_model(argv[1]));
  const Graph graph = plan_graph(model);
  const int64_t raw = formats::element_count(model->input.raw_shape);
  std::mt19937 rng(1);
  for (int n : batches) {
    std::vector<uint8_t> input(size_t(raw) * size_t(n));
    for (auto& v : input) v = uint8_t(rng() & 255);
    std::printf("%-16s batch %5d", model->name.c_str(), n);
    for (auto schedule : {cpu::CpuOptions::Schedule::Tiles, cpu::CpuOptions::Schedule::Images}) {
      cpu::CpuOptions o = base;
      o.schedule = schedule;
      auto backend = cpu::make_cpu_backend(o);
      CompileOptions co;
      co.max_batch = n;
      co.threads = 1;
      auto exe = backend->compile(graph, co);
      std::vector<std::vector<float>> out;
      std::vector<float*> ptrs;
      for (size_t i = 0; i < graph.outputs.size(); ++i) out.emplace_back(size_t(graph.output_elements(i)) * size_t(n));
      for (auto& v : out) ptrs.push_back(v.data());
      exe->run(input.data(), n, ptrs);
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        int calls = 0;
        const double t0 = thread_seconds();
        double t = t0;
        while (t - t0 < 0.2) {
          exe->run(input.data(), n, ptrs);
          ++calls;
          t = thread_seconds();
        }
        best = std::min(best, (t - t0) / calls);
      }
      std::printf("  %s %9.0f img/s", schedule == cpu::CpuOptions::Schedule::Tiles ? "tiles" : "images", n / best);
    }
    std::printf("\n");
  }
}

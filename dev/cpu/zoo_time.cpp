// Wall-time benchmark of the cpu backend for a dedicated machine (the GPU machine's host): per
// model, thread count, batch and schedule, images/s of the best and the median of `reps` rounds of
// at least `seconds` each, random uint8 inputs. No CUDA needed: links only the cpu backend.
//   dev/cpu/build_zoo_time.sh BUILD_DIR && /tmp/zoo_time ZOO MODELS THREADS BATCHES [SCHEDULES=auto] [reps=3] [seconds=0.1] [kernels=best]
//   e.g. /tmp/zoo_time /tmp/zoo cifar-vgg,resnet20 1,16 1,64,1024 auto,tiles,images
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/cpu/cpu_options.hpp"
#include "formats/model_loader.hpp"

using namespace engine;

static std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
  return out;
}

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: zoo_time ZOO MODELS THREADS BATCHES [auto,tiles,images] [reps] [seconds] [kernels]\n");
    return 2;
  }
  const std::string zoo = argv[1];
  const auto models = split(argv[2]);
  std::vector<int> threads, batches;
  for (auto& t : split(argv[3])) threads.push_back(std::stoi(t));
  for (auto& b : split(argv[4])) batches.push_back(std::stoi(b));
  const auto schedules = split(argc > 5 ? argv[5] : "auto");
  const int reps = argc > 6 ? std::atoi(argv[6]) : 3;
  const double seconds = argc > 7 ? std::atof(argv[7]) : 0.1;
  cpu::CpuOptions base;
  if (argc > 8 && std::string(argv[8]) != "best") base.kernels = *cpu::parse_kernels(argv[8]);
  for (const auto& name : models) {
    auto model = std::make_shared<const formats::Model>(formats::load_model(zoo + "/" + name + "/model.json"));
    const Graph graph = plan_graph(model);
    const int64_t raw = formats::element_count(model->input.raw_shape);
    std::mt19937 rng(1);
    const int most = *std::max_element(batches.begin(), batches.end());
    std::vector<uint8_t> input(size_t(raw) * size_t(most));
    for (auto& v : input) v = uint8_t(rng() & 255);
    std::vector<std::vector<float>> out;
    std::vector<float*> ptrs;
    for (size_t i = 0; i < graph.outputs.size(); ++i) out.emplace_back(size_t(graph.output_elements(i)) * size_t(most));
    for (auto& v : out) ptrs.push_back(v.data());
    for (const auto& sched : schedules) {
      cpu::CpuOptions o = base;
      o.schedule = sched == "tiles"    ? cpu::CpuOptions::Schedule::Tiles
                   : sched == "images" ? cpu::CpuOptions::Schedule::Images
                                       : cpu::CpuOptions::Schedule::Auto;
      auto backend = cpu::make_cpu_backend(o);
      for (int t : threads) {
        CompileOptions co;
        co.max_batch = most;
        co.threads = t;
        auto exe = backend->compile(graph, co);
        for (int n : batches) {
          exe->run(input.data(), n, ptrs);
          std::vector<double> rates;
          for (int r = 0; r < reps; ++r) {
            int calls = 0;
            const double t0 = now();
            double t1 = t0;
            while (t1 - t0 < seconds) {
              exe->run(input.data(), n, ptrs);
              ++calls;
              t1 = now();
            }
            rates.push_back(double(n) * calls / (t1 - t0));
          }
          std::sort(rates.begin(), rates.end());
          std::printf("engine %-16s %-6s threads %2d batch %5d  best %10.0f  median %10.0f img/s\n", name.c_str(),
                      sched.c_str(), t, n, rates.back(), rates[(rates.size() - 1) / 2]);
          std::fflush(stdout);
        }
      }
    }
  }
}

// train_bench_gpu: time per epoch of a GPU backend's training (custom or cudnn) with the data
// already in GPU memory (DeviceTrainer::step_device), for benchmarks/bench_train_gpu.py. No op logic here.
//
//   train_bench_gpu MODEL.json [--backend custom|cudnn] [--batch 256,32] [--samples 60000] [--epochs 5]
//                   [--warmup 1] [--optimizer adam|sgd] [--lr X] [--seed S] [--json OUT]
//
// The data set is `samples` random images (uint8, the model's raw input shape) and random labels,
// made once and copied to the device before anything is timed: the arithmetic of a step does not
// depend on the pixel values, and this needs no data files. An epoch is samples / batch full
// batches (the last partial batch dropped, as the PyTorch side does), each a whole step: forward,
// loss, backward, update and the loss/correct read-back the interface returns per step (one
// synchronisation per step, which PyTorch's loop does not have). Wall-clock time per epoch.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/gpu/train/device_trainer.hpp"
#include "engine/gpu/device.hpp"
#include "engine/train/init.hpp"
#include "formats/model_loader.hpp"

namespace {

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_bench_gpu MODEL.json [--backend custom|cudnn] [--batch 256,32] [--samples N] "
                         "[--epochs E] [--warmup W] [--optimizer adam|sgd] [--lr X] [--seed S] [--json OUT]\n");
    return 2;
  }
  std::string model_path = argv[1], json_path, optimizer = "adam", backend_name = "custom";
  std::vector<int> batches{256, 32};
  int samples = 60000, epochs = 5, warmup = 1;
  double lr = -1;
  uint64_t seed = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") batches = parse_list(v);
    else if (k == "--backend") backend_name = v;
    else if (k == "--samples") samples = std::stoi(v);
    else if (k == "--epochs") epochs = std::stoi(v);
    else if (k == "--warmup") warmup = std::stoi(v);
    else if (k == "--optimizer") optimizer = v;
    else if (k == "--lr") lr = std::stod(v);
    else if (k == "--seed") seed = std::stoull(v);
    else if (k == "--json") json_path = v;
    else throw std::invalid_argument("unknown option " + k);
  }

  formats::Model model = formats::load_model(model_path);
  engine::train::init_parameters(model, seed);
  model.has_weights = true;
  const engine::Graph graph = engine::plan_graph(std::make_shared<const formats::Model>(model));
  const auto& spec = model.input;
  if (spec.dtype != formats::InputDType::UInt8) throw std::invalid_argument("the benchmark takes uint8-input models");
  const size_t sample_bytes = size_t(formats::element_count(spec.raw_shape));
  const int classes = int(graph.value(graph.nodes[size_t(graph.value(graph.outputs[0]).producer)].inputs[0]).elements);

  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<uint8_t> images(sample_bytes * size_t(samples)), labels(static_cast<size_t>(samples));
  for (auto& b : images) b = uint8_t(rng() & 0xff);
  for (auto& l : labels) l = uint8_t(rng() % uint32_t(classes));
  engine::gpu::DeviceBuffer<uint8_t> d_images(images.size(), "benchmark images"), d_labels(labels.size(), "labels");
  CUDA_CHECK(cudaMemcpy(d_images.data(), images.data(), images.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_labels.data(), labels.data(), labels.size(), cudaMemcpyHostToDevice));

  if (backend_name != "custom" && backend_name != "cudnn")
    throw std::invalid_argument("--backend takes custom or cudnn, not " + backend_name);
  auto backend = engine::BackendRegistry::instance().create(backend_name);
  std::string results;
  for (int batch : batches) {
    engine::TrainOptions options;
    options.max_batch = batch;
    options.optimizer.kind = optimizer == "adam" ? engine::OptimizerKind::Adam : engine::OptimizerKind::SGD;
    options.optimizer.lr = lr > 0 ? lr : optimizer == "adam" ? 1e-3 : 0.01;
    // Both GPU backends' trainers are DeviceTrainers: step_device takes the batch in device memory.
    auto compiled = backend->compile_training(graph, options);
    auto* device_trainer = dynamic_cast<engine::gpu::train::DeviceTrainer*>(compiled.get());
    if (!device_trainer) throw std::logic_error(backend_name + "'s trainer takes no device input");
    auto& trainer = *device_trainer;
    const int steps = samples / batch;
    std::vector<double> ms;
    double last_loss = 0;
    for (int e = 0; e < warmup + epochs; ++e) {
      const auto start = std::chrono::steady_clock::now();
      double loss = 0;
      for (int s = 0; s < steps; ++s)
        loss += trainer.step_device(d_images.data() + size_t(s) * batch * sample_bytes, d_labels.data() + size_t(s) * batch,
                                    batch).loss_sum;
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (e >= warmup) ms.push_back(t);
      last_loss = loss / double(steps * batch);
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
    std::fprintf(stderr, "%s batch %d: %d steps/epoch, median %.2f ms/epoch (%.1f us/step), mean loss %.4f\n",
                 backend_name.c_str(), batch, steps, median, 1000 * median / steps, last_loss);
    std::string list;
    for (double v : ms) list += fmt::format("{}{:.4f}", list.empty() ? "" : ", ", v);
    results += fmt::format(
        "{}\n    {{\"framework\": \"engine-{}\", \"mode\": \"graph-replay\", \"batch\": {}, \"steps\": {}, "
        "\"epoch_ms\": [{}], \"median_epoch_ms\": {:.4f}, \"us_per_step\": {:.3f}, \"final_epoch_mean_loss\": {:.6f}}}",
        results.empty() ? "" : ",", backend_name, batch, steps, list, median, 1000 * median / steps, last_loss);
  }
  const std::string device = engine::gpu::describe(engine::gpu::current_device());
  const std::string json = fmt::format(
      "{{\n  \"model\": \"{}\", \"device\": \"{}\", \"samples\": {}, \"optimizer\": \"{}\", \"epochs\": {}, "
      "\"warmup\": {},\n  \"note\": \"data in device memory; per step: forward, loss, backward, update, loss read-back "
      "(one sync per step)\",\n  \"results\": [{}\n  ]\n}}\n",
      model_path, device, samples, optimizer, epochs, warmup, results);
  if (json_path.empty()) std::cout << json;
  else std::ofstream(json_path) << json;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench_gpu: %s\n", e.what());
    return 1;
  }
}

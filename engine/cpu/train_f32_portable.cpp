// float32 host trainer, portable build (see train_f32.hpp).
#include "engine/cpu/train_f32.hpp"

#include "engine/train/host_trainer.hpp"

namespace engine::cpu {

std::unique_ptr<TrainExecutable> make_trainer_f32_portable(const Graph& graph, const TrainOptions& options) {
  return std::make_unique<train::HostTrainer<float>>(graph, options, "cpu");
}

}  // namespace engine::cpu

// The one instantiation of the host trainer in double (compiled with -ffp-contract=off, as every
// reference source).
#include "engine/reference/train_f64.hpp"

#include "engine/train/host_trainer.hpp"

namespace engine::reference {

std::unique_ptr<TrainExecutable> make_trainer_f64(const Graph& graph, const TrainOptions& options) {
  return std::make_unique<train::HostTrainer<double>>(graph, options, "reference");
}

}  // namespace engine::reference

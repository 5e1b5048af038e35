#pragma once
// engine train's checkpoints: after epoch E, OUT.checkpoints/epoch-EEE.json (+ .safetensors) is
// the model as trained so far, a model like any other, and epoch-EEE.optimizer.safetensors beside
// it what --resume needs besides: the optimiser's buffers ("first", "second": parameter_count()
// floats each, engine/core/train.hpp's OptimizerState) and, as metadata, the step count, the epoch,
// the optimiser and the run's seed, batch and sample count (a resumed run must match them to
// continue bit for bit).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/train.hpp"
#include "formats/model.hpp"

namespace engine::cli {

struct CheckpointRun {
  int epoch = 0;              // epochs completed
  std::string optimizer;      // "sgd" or "adam"
  uint64_t seed = 0;
  int batch = 0;
  int64_t samples = 0;        // training samples per epoch
};

struct Checkpoint {
  formats::Model model;       // with the trained parameters
  OptimizerState state;
  CheckpointRun run;
};

// The optimiser sidecar's path for a checkpoint's graph file (X.json -> X.optimizer.safetensors).
std::string optimizer_state_path(const std::string& checkpoint_json);

void write_checkpoint(const std::string& path, const nlohmann::ordered_json& graph, const formats::Model& model,
                      const OptimizerState& state, const CheckpointRun& run);

// Throws FormatError naming the file: a missing or malformed model or sidecar, buffers of the wrong
// size, metadata missing or not a number.
Checkpoint read_checkpoint(const std::string& path);

}  // namespace engine::cli

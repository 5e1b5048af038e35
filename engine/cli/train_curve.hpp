#pragma once
// The learning curve of `engine train`, written beside the output model: OUT.curve.csv (one row
// per epoch), OUT.curve.json (the epochs, every step's loss and learning rate, and how the run was
// made) and OUT.curve.png, drawn by `python -m cnnengine.plot_training` where a Python with the
// package and matplotlib is there (otherwise a warning says so and the CSV/JSON remain).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace engine::cli {

struct EpochRecord {
  int epoch = 0;
  double loss = 0, accuracy = 0;  // over the epoch's training steps (running, as Keras reports it)
  std::optional<double> val_loss, val_accuracy;
  double seconds = 0, images_per_second = 0;
};

struct StepRecord {
  int epoch = 0;
  int64_t step = 0;  // from 0 over the whole run
  double loss = 0;   // the batch's mean loss
  double lr = 0;     // the learning rate this step used
};

struct TrainingCurve {
  std::vector<EpochRecord> epochs;
  std::vector<StepRecord> steps;
  int best_epoch = 0;  // the epoch whose parameters the output holds
  nlohmann::ordered_json run;  // options, data, backend: how to reproduce it
};

// `base` is the output path without ".json". Returns the paths written (csv, json, and png when
// drawn).
std::vector<std::string> write_curve(const std::string& base, const TrainingCurve& curve, bool plot);

}  // namespace engine::cli

#pragma once
// What `engine run` measured, and its two renderings: text for people, JSON for scripts.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"

namespace engine::cli {

// One data file's share of the run (several files or a folder: each attributed its results).
struct RunFile {
  std::string path;
  int64_t first = 0, count = 0;  // its images within the run
  int64_t correct = 0;           // with labels
};

struct RunResult {
  std::string backend, device;
  std::vector<int> devices;  // --devices: the GPUs the images were split across; empty: not given
  std::string path;  // the backend's execution path (fused or per-node), empty when it has one
  std::string model_name, model_path, data_path, labels_path;  // labels_path empty: no labels
  std::vector<RunFile> files;                                   // in the order classified
  std::string output_kind = "probability";  // what the first output holds: probability, score or logit
  std::vector<std::string> class_names;                         // the model's labels, may be empty
  int64_t images = 0, classes = 0;
  int batch = 0;
  std::string precision;
  bool deterministic = true;
  std::vector<float> first_output;  // [images, classes]
  std::vector<int> predicted;       // argmax of each row
  std::vector<uint8_t> labels;      // empty without labels
  int64_t correct = 0;
  std::vector<int64_t> confusion;   // [true label][predicted], classes x classes
  double seconds = 0, plan_seconds = 0, load_seconds = 0;
  std::optional<RunTimings> device_ms;  // summed over batches, when the backend measures them
};

void print_run_report(const RunResult& r);
std::string run_report_json(const RunResult& r);

}  // namespace engine::cli

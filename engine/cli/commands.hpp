#pragma once
// The engine's subcommands. Each takes its parsed options and returns the process exit code;
// errors are thrown (main() turns them into one line on stderr and exit code 1).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace engine {
class Backend;
}  // namespace engine

namespace engine::cli {

struct RunOptions {
  std::string model;
  std::vector<std::string> data;  // data files and folders of images, classified in this order
  std::string labels;        // empty: look for MNIST-named labels beside the data
  std::string backend;       // empty: the best available
  std::optional<int> batch;  // none: the backend's preferred batch (256 on a CPU, 65536 on a GPU)
  std::optional<int64_t> limit;
  std::string output;        // "index class value" lines (several files: "file index class value")
  std::string dump_outputs;  // first output as float32 .npy
  bool json = false;
  std::string precision = "fp32";
  bool nondeterministic = false;
  bool no_fuse = false;      // per-node kernels even where a backend would fuse
  bool no_cuda_graph = false;  // plain launches instead of CUDA-graph replay
  int threads = 0;  // CPU backends; 0: all cores
  std::optional<std::string> devices;  // GPU backends: "all" or "0,1,..." (engine::parse_device_list); none: the current GPU
};

struct InfoOptions {
  std::string model;
};

struct ShowOptions {
  std::string data;
  int64_t index = 0;
  std::string labels;
};

// engine train (train_command.cpp; docs/design/training.md).
struct TrainCommandOptions {
  std::string model;       // full model (fine-tuning) or architecture-only graph
  std::string data;        // training images (IDX, raw or .gz)
  std::string labels;      // empty: the MNIST-named file beside the images
  std::string val;         // validation images (optional)
  std::string val_labels;  // empty: beside the validation images
  int64_t val_split = 0;   // hold out the last N training samples as the validation set (0: off)
  int epochs = 1;
  int batch = 32;
  std::string optimizer = "adam";  // torch.optim.Adam's defaults: what a new user expects to learn
  std::optional<double> lr;  // none: 0.01 for SGD, 0.001 for Adam
  double lr_decay = 0, momentum = 0, weight_decay = 0;
  std::string lr_schedule = "inverse-time";  // or "cosine" (over the run's steps)
  int warmup_epochs = 0;   // cosine only: linear warm-up over this many epochs' steps
  std::string augment;     // engine/train/augment.hpp: "shift=2,flip"; empty: none
  uint64_t seed = 0;
  bool init = false;       // re-initialise a full model's parameters
  std::string init_scheme = "torch";  // or "keras" (glorot_uniform, zero biases)
  std::string backend;     // empty: cpu
  int threads = 0;         // 0: all cores
  std::optional<std::string> devices;  // GPU backends: "all" or "0,1"; several: data-parallel
  int early_stopping = 0;  // patience in epochs; 0: off
  int64_t steps = 0;       // stop after this many steps in all (0: run every epoch)
  int64_t limit = 0;       // train on the first N samples only (0: all)
  std::string output;      // OUT.json
  std::string resume;      // a checkpoint (OUT.checkpoints/epoch-NNN.json) to continue from; empty: none
  double progress_seconds = 10;  // stderr not a terminal: a progress line this often
  bool no_shuffle = false, no_checkpoints = false, no_plot = false;
};

// engine calibrate (calibrate_command.cpp; formats/model-format-v1.md, "Calibration").
struct CalibrateOptions {
  std::string model, data, output;
  int64_t images = 1000;           // the first N samples of DATA
  std::string method = "max";      // or "percentile"
  double percentile = 99.99;
  std::string backend;             // empty: cpu
  int batch = 256;
  int threads = 0;
};

int run_command(const RunOptions& options);
int calibrate_command(const CalibrateOptions& options);
int train_command(const TrainCommandOptions& options);
// --devices of engine run and engine train against the backend's GPUs (run_command.cpp); none given: {}.
std::vector<int> pick_devices(const Backend& backend, const std::optional<std::string>& text);
int info_command(const InfoOptions& options);
int show_command(const ShowOptions& options);
int backends_command();
// engine bench MODEL / engine bench ops (bench_command.cpp): registers the subcommand and its options.
CLI::App* add_bench_command(CLI::App& app);
int bench_command(const CLI::App& bench);

}  // namespace engine::cli

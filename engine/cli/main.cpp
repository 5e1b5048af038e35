// The `engine` command: parse arguments, set up logging, dispatch, turn every error into one line.
// Exit codes: 0 success, 2 usage error, 1 any other error.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "engine/cli/commands.hpp"
#include "engine/cli/usage_errors.hpp"
#include "engine/core/registry.hpp"
#include "formats/error.hpp"

namespace {

// Messages may quote file contents or nested errors; a single line keeps stderr greppable.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string backend_names() {
  std::string names;
  for (const auto& e : engine::BackendRegistry::instance().entries()) names += (names.empty() ? "" : ", ") + e.name;
  return names;
}

void setup_logging(bool verbose, bool quiet) {
  // stderr only: stdout carries results (and --json), which scripts parse.
  auto logger = spdlog::stderr_color_mt("engine");
  logger->set_pattern("%^%l%$: %v");
  logger->set_level(verbose ? spdlog::level::debug : quiet ? spdlog::level::warn : spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cnn-engine: classify images with a small CNN on the CPU or a GPU"};
  app.set_version_flag("--version", ENGINE_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // -v/-q also after the subcommand
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "error: " + one_line(e.what()) + " (see --help)\n";
  });
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "Log debug details (plan decisions) to stderr");
  app.add_flag("-q,--quiet", quiet, "Log only warnings and errors");

  engine::cli::RunOptions run;
  auto* run_cmd = app.add_subcommand("run", "Classify every image of DATA with MODEL");
  run_cmd->add_option("MODEL", run.model, "Model graph file (format v1 .json)")->required();
  run_cmd
      ->add_option("DATA", run.data,
                   "IDX images (raw or .gz), PNG/JPEG/PGM images, folders of them; IDX float32 samples for a "
                   "float32-input model. Several: classified in order, each file's results attributed to it")
      ->required();
  run_cmd->add_option("--labels", run.labels, "IDX labels (default: the MNIST-named file beside DATA, if any)");
  run_cmd->add_option("--backend", run.backend, "Backend: " + backend_names() + " (default: best available)");
  run_cmd->add_option("--batch", run.batch, "Images per batch (default: the backend's, 256 on a CPU, 65536 on a GPU)")
      ->check(CLI::Range(1, 1 << 20));
  run_cmd->add_option("--limit", run.limit, "Classify only the first N images")->check(CLI::PositiveNumber);
  run_cmd->add_option("--output", run.output, "Write every prediction to FILE: 'index class value' lines (several data files: 'file index class "
                  "value'); the value is the class's probability, score or logit, as the model outputs");
  run_cmd->add_flag("--json", run.json, "Print a JSON summary on stdout instead of the text report");
  run_cmd->add_option("--dump-outputs", run.dump_outputs, "Write the first output [N, K] as float32 .npy");
  run_cmd->add_option("--precision", run.precision,
                      "fp32; tf32 (GPU tensor cores; less exact); fp16, bf16, int8 on tensor cores (custom: one "
                      "kernel for the LeNet-5 family, conv2d/dense per node otherwise; cudnn: fp16/bf16 stored in that "
                      "type, NHWC; int8 conv2d/dense); reference: emulated; int8 needs a calibrated model: engine "
                      "calibrate")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "int8"}))
      ->capture_default_str();
  run_cmd->add_option("--threads", run.threads, "CPU backends: threads to use (default: all cores)")
      ->check(CLI::Range(1, engine::kMaxThreads));
  run_cmd->add_option("--devices", run.devices,
                      "GPU backends: the GPUs to split the images across, all or indices like 0,1 (see `engine "
                      "backends`); the output is the bits of one GPU at the same --batch");
  run_cmd->add_flag("--nondeterministic", run.nondeterministic,
                    "Allow faster algorithms whose results may vary in the last bits from run to run");
  run_cmd->add_flag("--no-fuse", run.no_fuse,
                    "Run every node with its own kernel (the custom backend otherwise fuses chains)");
  run_cmd->add_flag("--no-cuda-graph", run.no_cuda_graph,
                    "Launch kernels one by one (GPU backends otherwise replay each batch size's forward pass as a "
                    "CUDA graph)");

  engine::cli::InfoOptions info;
  auto* info_cmd = app.add_subcommand("info", "Show a model's layers, parameters, input and the backends here");
  info_cmd->add_option("MODEL", info.model, "Model graph file (format v1 .json)")->required();

  engine::cli::CalibrateOptions calibrate;
  auto* calibrate_cmd =
      app.add_subcommand("calibrate", "Measure activation ranges for int8 quantization on sample data; write MODEL "
                                      "with them (formats/model-format-v1.md, \"Calibration\")");
  calibrate_cmd->add_option("MODEL", calibrate.model, "Model graph file (format v1 .json)")->required();
  calibrate_cmd->add_option("DATA", calibrate.data, "Calibration samples: IDX images (raw or .gz), one image, or IDX float32")
      ->required();
  calibrate_cmd->add_option("-o,--output", calibrate.output, "The calibrated model to write (OUT.json + OUT.safetensors)")
      ->required();
  calibrate_cmd->add_option("--images", calibrate.images, "Use the first N samples of DATA")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  calibrate_cmd->add_option("--method", calibrate.method, "max (largest |x|) or percentile (that share of |x|)")
      ->check(CLI::IsMember({"max", "percentile"}))
      ->capture_default_str();
  calibrate_cmd->add_option("--percentile", calibrate.percentile, "With --method percentile: the share of |x| kept, in percent")
      ->capture_default_str();
  calibrate_cmd->add_option("--backend", calibrate.backend, "Backend that runs the samples (default cpu)");
  calibrate_cmd->add_option("--batch", calibrate.batch, "Samples per run")->check(CLI::Range(1, 65536))->capture_default_str();
  calibrate_cmd->add_option("--threads", calibrate.threads, "CPU backends: threads (default: all cores)")
      ->check(CLI::Range(1, engine::kMaxThreads));

  engine::cli::ShowOptions show;
  auto* show_cmd = app.add_subcommand("show", "Print one image of DATA as ASCII art");
  show_cmd->add_option("DATA", show.data, "IDX images (raw or .gz) or one PNG/JPEG/PGM image")->required();
  show_cmd->add_option("--index", show.index, "Which image (from 0)")->capture_default_str();
  show_cmd->add_option("--labels", show.labels, "IDX labels (default: the MNIST-named file beside DATA, if any)");

  engine::cli::TrainCommandOptions train;
  auto* train_cmd = app.add_subcommand("train", "Train MODEL (a full model or an architecture-only graph) on labelled images");
  train_cmd->add_option("MODEL", train.model, "Model graph file (format v1 .json; no weights: architecture only)")->required();
  train_cmd->add_option("--data", train.data, "Training images (IDX, raw or .gz)")->required();
  train_cmd->add_option("--labels", train.labels, "Training labels (default: the MNIST-named file beside --data)");
  train_cmd->add_option("--val", train.val, "Validation images, evaluated after every epoch");
  train_cmd->add_option("--val-labels", train.val_labels, "Validation labels (default: beside --val)");
  train_cmd->add_option("--val-split", train.val_split,
                        "Hold out the last N samples of --data (after --limit) as the validation set, instead of --val")
      ->check(CLI::PositiveNumber);
  train_cmd->add_option("--epochs", train.epochs, "Passes over the training set")->check(CLI::Range(1, 100000))->capture_default_str();
  train_cmd->add_option("--batch", train.batch, "Samples per step")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  train_cmd->add_option("--optimizer", train.optimizer, "adam or sgd (torch.optim definitions)")
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  train_cmd->add_option("--lr", train.lr, "Learning rate (default 0.01 for sgd, 0.001 for adam)")->check(CLI::PositiveNumber);
  train_cmd->add_option("--lr-decay", train.lr_decay, "lr_t = lr / (1 + D * step)")->check(CLI::NonNegativeNumber);
  train_cmd->add_option("--lr-schedule", train.lr_schedule,
                        "inverse-time (lr / (1 + D * step), the default) or cosine (lr * (1 + cos(pi * step / steps)) / 2 "
                        "over the run's steps, as CosineAnnealingLR stepped per batch)")
      ->check(CLI::IsMember({"inverse-time", "cosine"}));
  train_cmd->add_option("--warmup-epochs", train.warmup_epochs,
                        "With --lr-schedule cosine: raise lr linearly over this many epochs' steps first")
      ->check(CLI::Range(0, 100000));
  train_cmd->add_option("--augment", train.augment,
                        "Random transforms of each training sample, from --seed: shift=N (translate by up to N pixels, "
                        "zero fill), flip (left-right, p = 1/2); e.g. shift=2,flip");
  train_cmd->add_option("--momentum", train.momentum, "SGD momentum (dampening 0, no Nesterov)")->check(CLI::Range(0.0, 1.0));
  train_cmd->add_option("--weight-decay", train.weight_decay, "L2 added to the gradient (torch.optim)")
      ->check(CLI::NonNegativeNumber);
  train_cmd->add_option("--seed", train.seed, "Seed of the initialisation and of the shuffling")->capture_default_str();
  train_cmd->add_flag("--init", train.init, "Initialise a full model's parameters afresh (PyTorch's default scheme)");
  train_cmd->add_option("--init-scheme", train.init_scheme,
                        "torch (kaiming_uniform a=sqrt(5), PyTorch's default) or keras (glorot_uniform, zero biases)")
      ->check(CLI::IsMember({"torch", "keras"}))
      ->capture_default_str();
  train_cmd->add_option("--backend", train.backend, "Backend that trains: reference, cpu, custom or cudnn (GPU) (default cpu)");
  train_cmd->add_option("--threads", train.threads, "CPU backends: threads (default: all cores)")->check(CLI::Range(1, engine::kMaxThreads));
  train_cmd->add_option("--devices", train.devices,
                        "GPU backends: the GPUs to train on, all or indices like 0,1 (see `engine backends`); several: "
                        "data parallel, each --batch split across them and the gradients summed by NCCL");
  train_cmd->add_option("--early-stopping", train.early_stopping,
                        "Stop after PATIENCE epochs without a lower validation loss; keep the best epoch")
      ->check(CLI::Range(1, 100000));
  train_cmd->add_option("--steps", train.steps, "Stop after N steps in all (seed 003's schedule: 1600)")
      ->check(CLI::PositiveNumber);
  train_cmd->add_option("--limit", train.limit, "Train on the first N samples of --data only")->check(CLI::PositiveNumber);
  train_cmd->add_option("-o,--output", train.output, "Trained model to write (OUT.json + OUT.safetensors)")->required();
  train_cmd->add_option("--resume", train.resume,
                        "Continue from a checkpoint (OUT.checkpoints/epoch-NNN.json): its parameters, optimiser state and "
                        "step; with the same options and data, the result is the uninterrupted run's, bit for bit");
  train_cmd->add_option("--progress-every", train.progress_seconds,
                        "When stderr is not a terminal: a progress line every S seconds (a terminal gets a bar)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  train_cmd->add_flag("--no-shuffle", train.no_shuffle, "Keep the data's order (comparisons with other frameworks)");
  train_cmd->add_flag("--no-checkpoints", train.no_checkpoints, "Write no per-epoch checkpoint (OUT.checkpoints/)");
  train_cmd->add_flag("--no-plot", train.no_plot, "Write the curve as CSV/JSON only, no PNG");

  auto* backends_cmd = app.add_subcommand("backends", "List the backends built in and whether each can run here");
  auto* bench_cmd = engine::cli::add_bench_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, with exit code 0.
    if (e.get_exit_code() != 0) {
      if (const auto message = engine::cli::unrecognised_argument_message(app)) {
        std::fprintf(stderr, "error: %s\n", one_line(*message).c_str());
        return 2;
      }
    }
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    setup_logging(verbose, quiet);
    if (*run_cmd) return engine::cli::run_command(run);
    if (*info_cmd) return engine::cli::info_command(info);
    if (*train_cmd) return engine::cli::train_command(train);
    if (*calibrate_cmd) return engine::cli::calibrate_command(calibrate);
    if (*show_cmd) return engine::cli::show_command(show);
    if (*backends_cmd) return engine::cli::backends_command();
    if (*bench_cmd) return engine::cli::bench_command(*bench_cmd);
    return 2;
  } catch (const formats::FormatError& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());  // already "file: problem"
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
  } catch (...) {
    std::fprintf(stderr, "error: unexpected failure\n");
  }
  return 1;
}

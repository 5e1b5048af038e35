// engine train: load a model (full, or architecture only), check every data file, compile a
// TrainExecutable once, then epochs of shuffled batches; validation, early stopping, a checkpoint
// per epoch, the trained model and its learning curve. No op or optimiser logic here: that is the
// backend's (engine/core/train.hpp).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "engine/cli/commands.hpp"
#include "engine/cli/progress.hpp"
#include "engine/cli/train_checkpoint.hpp"
#include "engine/cli/train_curve.hpp"
#include "engine/cli/train_data.hpp"
#include "engine/core/graph.hpp"
#include "engine/core/multi_device.hpp"
#include "engine/core/registry.hpp"
#include "engine/train/augment.hpp"
#include "engine/train/init.hpp"
#include "engine/train/random.hpp"
#include "formats/error.hpp"
#include "formats/model_loader.hpp"
#include "formats/model_writer.hpp"

namespace engine::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The trainable backend the user named, or cpu (every built-in backend trains; custom and cudnn on a GPU).
std::unique_ptr<Backend> pick_training_backend(const std::string& name) {
  auto backend = BackendRegistry::instance().create(name.empty() ? "cpu" : name);
  if (const auto why = backend->cannot_train()) throw std::runtime_error(*why);
  spdlog::info("training on backend {}: {}", backend->name(), backend->description());
  return backend;
}

// The source graph file's JSON, to write the output with every key and name as the user wrote them.
nlohmann::ordered_json read_graph_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::ordered_json::parse(text.str());  // load_model has already validated it
}

// A copy of `model` holding the trainer's current parameters.
formats::Model with_parameters(const formats::Model& model, const TrainExecutable& trainer, std::vector<float>& scratch) {
  formats::Model out = model;
  out.has_weights = true;
  scratch.resize(size_t(trainer.parameter_count()));
  trainer.read_parameters(scratch);
  for (const ParameterInfo& p : trainer.parameters()) {
    for (formats::Node& node : out.nodes) {
      if (node.name != p.node->name) continue;
      auto& tensor = p.is_bias ? node.bias : node.weight;
      tensor->values.assign(scratch.begin() + p.offset, scratch.begin() + p.offset + p.elements);
    }
  }
  return out;
}

std::string output_base(const std::string& output) {
  std::filesystem::path p(output);
  if (p.extension() != ".json") throw std::invalid_argument(fmt::format("-o {}: the output must be a .json graph file", output));
  // Found now rather than after hours of training.
  std::error_code ec;
  if (p.has_parent_path() && !std::filesystem::is_directory(p.parent_path(), ec))
    throw std::invalid_argument(fmt::format("-o {}: the folder {} does not exist", output, p.parent_path().string()));
  return (p.parent_path() / p.stem()).string();
}

std::string count_of(int64_t n, const char* noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

// --resume: the checkpoint's parameters into `model`, node by node, after checking that it is a
// checkpoint of this architecture.
void take_parameters(formats::Model& model, const formats::Model& from, const std::string& checkpoint) {
  for (formats::Node& node : model.nodes) {
    const auto other = std::find_if(from.nodes.begin(), from.nodes.end(), [&](const formats::Node& n) { return n.name == node.name; });
    for (auto* t : {&node.weight, &node.bias}) {
      if (!t->has_value()) continue;
      const auto* theirs = other == from.nodes.end() ? nullptr : (t == &node.weight ? &other->weight : &other->bias);
      if (!theirs || !theirs->has_value() || (*theirs)->shape != (*t)->shape)
        throw formats::FormatError(checkpoint, fmt::format("is not a checkpoint of model '{}': no {} {} for node '{}'",
                                                           model.name, formats::shape_to_string((*t)->shape),
                                                           t == &node.weight ? "weight" : "bias", node.name));
      (*t)->values = (*theirs)->values;
    }
  }
}

struct Pass {
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  double loss() const { return loss_sum / double(count); }
  double accuracy() const { return double(correct) / double(count); }
};

Pass evaluate_set(TrainExecutable& trainer, const LabelledSet& set) {
  Pass p;
  const int batch = trainer.max_batch();
  for (int64_t start = 0; start < set.count; start += batch) {
    const int n = int(std::min<int64_t>(batch, set.count - start));
    const BatchResult r = trainer.evaluate(set.bytes.data() + size_t(start) * set.sample_bytes, set.labels.data() + start, n);
    p.loss_sum += r.loss_sum;
    p.correct += r.correct;
  }
  p.count = set.count;
  return p;
}

OptimizerOptions optimizer_options(const TrainCommandOptions& o) {
  OptimizerOptions opt;
  opt.kind = o.optimizer == "adam" ? OptimizerKind::Adam : OptimizerKind::SGD;
  // PyTorch's SGD has no default learning rate; 0.01 is Keras' SGD default. Adam: 0.001 in both.
  opt.lr = o.lr.value_or(opt.kind == OptimizerKind::Adam ? 0.001 : 0.01);
  opt.lr_decay = o.lr_decay;
  if (o.lr_schedule == "cosine") {
    if (o.lr_decay != 0) throw std::invalid_argument("--lr-decay is the inverse-time schedule's; --lr-schedule cosine has none");
    opt.schedule = LrSchedule::Cosine;  // cosine_steps: set once the data's size is known
  }
  opt.momentum = o.momentum;
  opt.weight_decay = o.weight_decay;
  if (opt.kind == OptimizerKind::Adam && o.momentum != 0)
    throw std::invalid_argument("--momentum applies to --optimizer sgd only (Adam's are beta1 0.9, beta2 0.999)");
  return opt;
}

}  // namespace

int train_command(const TrainCommandOptions& o) {
  // Everything that can be wrong is found before the first step: options, backend, model, data.
  if (o.val_split > 0 && !o.val.empty()) throw std::invalid_argument("--val-split and --val both name a validation set: give one");
  if (o.early_stopping > 0 && o.val.empty() && o.val_split == 0)
    throw std::invalid_argument("--early-stopping watches the validation loss: give --val IMAGES or --val-split N");
  if (!o.resume.empty() && o.early_stopping > 0)
    throw std::invalid_argument("--resume continues from a checkpoint's parameters; early stopping's best epoch before "
                                "it is not kept: give one of --resume and --early-stopping");
  if (!o.resume.empty() && o.init) throw std::invalid_argument("--resume takes the checkpoint's parameters; --init would discard them");
  OptimizerOptions opt = optimizer_options(o);  // the cosine schedule's length is set below
  const std::string base = output_base(o.output);
  auto backend = pick_training_backend(o.backend);

  formats::Model model = formats::load_model(o.model);
  std::optional<Checkpoint> resume;
  if (!o.resume.empty()) {
    resume = read_checkpoint(o.resume);
    if (resume->run.optimizer != o.optimizer)
      throw std::invalid_argument(fmt::format("--resume {}: its optimiser state is {}'s, but this run's --optimizer is {}",
                                              o.resume, resume->run.optimizer, o.optimizer));
    if (resume->run.epoch >= o.epochs)
      throw std::invalid_argument(fmt::format("--resume {}: the checkpoint has done {} already; --epochs {} leaves "
                                              "nothing to train", o.resume, count_of(resume->run.epoch, "epoch"), o.epochs));
    take_parameters(model, resume->model, o.resume);
    model.has_weights = true;
  }
  const bool init = !resume && (o.init || !model.has_weights);
  if (init) {
    const bool keras = o.init_scheme == "keras";
    train::init_parameters(model, o.seed, keras ? train::InitScheme::Keras : train::InitScheme::Torch);
    spdlog::info("{}: parameters initialised as {} does by default ({}), seed {}", o.model, keras ? "Keras" : "PyTorch",
                 keras ? "glorot_uniform, zero biases" : "kaiming_uniform a=sqrt(5)", o.seed);
  }
  model.has_weights = true;
  auto shared = std::make_shared<const formats::Model>(model);
  const Graph graph = plan_graph(shared);
  check_trainable(graph);
  const int64_t classes = graph.value(graph.nodes[size_t(graph.value(graph.outputs[0]).producer)].inputs[0]).elements;
  if (classes > 256)
    throw std::invalid_argument(fmt::format("model '{}' has {} classes; labels are bytes, so at most 256", model.name, classes));

  LabelledSet train_set = load_labelled_set(model, classes, o.data, o.labels, "training set");
  if (o.limit > 0 && o.limit < train_set.count) {
    train_set.count = o.limit;
    train_set.bytes.resize(size_t(o.limit) * train_set.sample_bytes);
    train_set.labels.resize(size_t(o.limit));
  }
  std::optional<LabelledSet> val_set;
  if (o.val_split > 0) {
    // Keras' validation_split: the last samples, before any shuffling, never trained on.
    if (o.val_split >= train_set.count)
      throw std::invalid_argument(fmt::format("--val-split {}: the training set has only {} samples", o.val_split,
                                              train_set.count));
    LabelledSet v;
    v.source = fmt::format("the last {} samples of {}", o.val_split, train_set.source);
    v.labels_path = train_set.labels_path;
    v.count = o.val_split;
    v.sample_bytes = train_set.sample_bytes;
    const int64_t keep = train_set.count - o.val_split;
    v.bytes.assign(train_set.bytes.begin() + ptrdiff_t(size_t(keep) * train_set.sample_bytes), train_set.bytes.end());
    v.labels.assign(train_set.labels.begin() + ptrdiff_t(keep), train_set.labels.end());
    train_set.count = keep;
    train_set.bytes.resize(size_t(keep) * train_set.sample_bytes);
    train_set.labels.resize(size_t(keep));
    val_set = std::move(v);
  }
  const int64_t steps_per_epoch = (train_set.count + std::min<int64_t>(o.batch, train_set.count) - 1) /
                                  std::min<int64_t>(o.batch, train_set.count);
  const int64_t total_steps = o.steps > 0 ? std::min<int64_t>(o.steps, steps_per_epoch * o.epochs) : steps_per_epoch * o.epochs;
  if (o.warmup_epochs > 0 && opt.schedule != LrSchedule::Cosine)
    throw std::invalid_argument("--warmup-epochs goes with --lr-schedule cosine");
  if (opt.schedule == LrSchedule::Cosine) {
    opt.cosine_steps = total_steps;
    opt.warmup_steps = std::min<int64_t>(int64_t(o.warmup_epochs) * steps_per_epoch, total_steps);
  }
  const train::AugmentOptions augment = train::parse_augment(o.augment);
  std::optional<train::Augmenter> augmenter;
  if (augment.any()) {
    const Shape& in = model.input.raw_shape;
    if (in.size() != 3)
      throw std::invalid_argument(fmt::format("--augment {}: the model's input must be an image [channels, height, width]; "
                                              "'{}' takes {}", o.augment, model.name, formats::shape_to_string(in)));
    if (augment.shift >= in[1] || augment.shift >= in[2])
      throw std::invalid_argument(fmt::format("--augment {}: a shift of {} pixels moves a {}x{} image out of its frame",
                                              o.augment, augment.shift, in[1], in[2]));
    augmenter.emplace(augment, in[0], in[1], in[2], train_set.sample_bytes / size_t(in[0] * in[1] * in[2]), o.seed);
  }
  if (!o.val.empty()) val_set = load_labelled_set(model, classes, o.val, o.val_labels, "validation set");
  if (resume && resume->run.samples != train_set.count)
    throw std::invalid_argument(fmt::format("--resume {}: the checkpoint's run trained on {} per epoch, this one has {}: "
                                            "not the same training set", o.resume, count_of(resume->run.samples, "sample"),
                                            train_set.count));
  spdlog::info("training set: {} samples from {} (labels {}){}", train_set.count, train_set.source, train_set.labels_path,
               val_set ? fmt::format("; validation set: {} samples from {}", val_set->count, val_set->source) : "");

  TrainOptions topts;
  topts.max_batch = int(std::min<int64_t>(o.batch, train_set.count));
  topts.threads = o.threads;
  topts.optimizer = opt;
  topts.devices = pick_devices(*backend, o.devices);
  auto trainer = backend->compile_training(graph, topts);
  if (resume) {
    trainer->write_optimizer_state(resume->state);
    spdlog::info("resuming from {}: epoch {} done, {} taken", o.resume, resume->run.epoch, count_of(resume->state.steps, "step"));
    if (resume->run.seed != o.seed || resume->run.batch != topts.max_batch)
      spdlog::warn("--resume {}: trained with seed {} and batch {}, this run has seed {} and batch {}: it continues, but "
                   "not as the uninterrupted run would", o.resume, resume->run.seed, resume->run.batch, o.seed, topts.max_batch);
  }
  if (topts.devices.size() > 1)
    spdlog::info("data parallel on {} GPUs: each batch of {} split into shards of about {}", topts.devices.size(),
                 topts.max_batch, (topts.max_batch + int(topts.devices.size()) - 1) / int(topts.devices.size()));
  spdlog::debug("plan: {}", trainer->plan_summary());
  spdlog::info("{} parameters; {} of {} (batch {}), {} lr {}{}{}{}{}{}", trainer->parameter_count(), count_of(o.epochs, "epoch"),
               count_of(steps_per_epoch, "step"), topts.max_batch, opt.kind == OptimizerKind::Adam ? "Adam" : "SGD", opt.lr,
               opt.lr_decay != 0 ? fmt::format(" decay {}", opt.lr_decay) : "",
               opt.schedule == LrSchedule::Cosine
                   ? fmt::format(" cosine over {} steps{}", opt.cosine_steps,
                                 opt.warmup_steps > 0 ? fmt::format(" after {} of warm-up", opt.warmup_steps) : "")
                   : "",
               augment.any() ? fmt::format(", augmented ({})", augment.describe()) : "",
               opt.momentum != 0 ? fmt::format(" momentum {}", opt.momentum) : "",
               opt.weight_decay != 0 ? fmt::format(" weight decay {}", opt.weight_decay) : "");

  const nlohmann::ordered_json source_json = read_graph_json(o.model);
  const std::string checkpoints = base + ".checkpoints";
  if (!o.no_checkpoints) std::filesystem::create_directories(checkpoints);

  TrainingCurve curve;
  curve.run = {{"model", o.model},          {"data", train_set.source},
               {"labels", train_set.labels_path},
               {"validation", val_set ? nlohmann::ordered_json(val_set->source) : nlohmann::ordered_json()},
               {"backend", backend->name()}, {"optimizer", o.optimizer},
               {"lr", opt.lr},              {"lr_decay", opt.lr_decay},
               {"lr_schedule", o.lr_schedule}, {"warmup_steps", opt.warmup_steps},
               {"augment", augment.describe()},
               {"momentum", opt.momentum},  {"weight_decay", opt.weight_decay},
               {"batch", topts.max_batch},  {"epochs", o.epochs},
               {"seed", o.seed},            {"shuffle", !o.no_shuffle},
               {"initialised", init ? nlohmann::ordered_json(o.init_scheme) : nlohmann::ordered_json(false)},       {"threads", o.threads},
               {"steps", o.steps},          {"limit", o.limit},
               {"resumed_from", resume ? nlohmann::ordered_json(o.resume) : nlohmann::ordered_json()}};

  // The order of samples: one SplitMix64 stream for the whole run, a Fisher-Yates shuffle per epoch.
  train::SplitMix64 rng(train::shuffle_stream(o.seed));
  std::vector<int64_t> order(size_t(train_set.count));
  const int first_epoch = resume ? resume->run.epoch + 1 : 1;
  curve.best_epoch = first_epoch - 1;  // a resumed run that takes no step keeps the checkpoint's
  if (resume) {
    // The random streams as the uninterrupted run leaves them after those epochs: each epoch drew
    // one shuffle and, augmenting, each sample's draws (their number does not depend on the pixels).
    std::vector<uint8_t> sample(train_set.sample_bytes);
    for (int epoch = 1; epoch < first_epoch; ++epoch) {
      std::iota(order.begin(), order.end(), 0);
      if (!o.no_shuffle) train::shuffle(order, rng);
      if (augmenter)
        for (int64_t i = 0; i < train_set.count; ++i) augmenter->apply(sample.data());
    }
  }
  const int batch = topts.max_batch;
  // Two batch buffers: while the trainer steps on one, a second thread gathers (and augments) the
  // next into the other. Batches are still filled one after another in the loop's order, so the
  // samples, the augmenter's random draws and the bits are those of a serial loop; the host's share
  // of a step (gathering 256 x N samples for N GPUs) no longer adds to the GPUs' time.
  std::array<std::vector<uint8_t>, 2> batch_bytes, batch_labels;
  for (int b = 0; b < 2; ++b) {
    batch_bytes[size_t(b)].resize(size_t(batch) * train_set.sample_bytes);
    batch_labels[size_t(b)].resize(size_t(batch));
  }
  auto fill = [&](int slot, int64_t first) {
    const int n = int(std::min<int64_t>(batch, train_set.count - first));
    uint8_t* bytes = batch_bytes[size_t(slot)].data();
    for (int i = 0; i < n; ++i) {
      const int64_t s = order[size_t(first + i)];
      std::copy_n(train_set.bytes.data() + size_t(s) * train_set.sample_bytes, train_set.sample_bytes,
                  bytes + size_t(i) * train_set.sample_bytes);
      batch_labels[size_t(slot)][size_t(i)] = train_set.labels[size_t(s)];
      if (augmenter) augmenter->apply(bytes + size_t(i) * train_set.sample_bytes);
    }
    return n;
  };
  WorkerGroup step_and_fill(2);
  std::vector<float> scratch, best_params;
  double best_val = std::numeric_limits<double>::infinity();
  int since_best = 0;

  bool out_of_steps = false;
  for (int epoch = first_epoch; epoch <= o.epochs && !out_of_steps; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    if (!o.no_shuffle) train::shuffle(order, rng);
    Pass pass;
    ProgressBar progress(train_set.count, true, o.progress_seconds, fmt::format("epoch {}/{}", epoch, o.epochs));
    const auto start = Clock::now();
    int slot = 0, n = 0;
    for (int64_t first = 0; first < train_set.count; first += batch) {
      if (o.steps > 0 && trainer->steps_taken() >= o.steps) {
        out_of_steps = true;  // the epoch ends here; it is still validated and checkpointed
        break;
      }
      if (first == 0) n = fill(slot, 0);  // the epoch's first batch; later ones were filled during a step
      const int64_t after = first + batch;
      const bool prefetch = after < train_set.count && !(o.steps > 0 && trainer->steps_taken() + 1 >= o.steps);
      const double lr = scheduled_lr(opt, trainer->steps_taken());
      BatchResult r;
      int next_n = 0;
      auto work = [&](int i) {
        if (i == 0)
          r = trainer->step(batch_bytes[size_t(slot)].data(), batch_labels[size_t(slot)].data(), n);
        else if (prefetch)
          next_n = fill(1 - slot, after);
      };
      step_and_fill.run(work);
      if (!std::isfinite(r.loss_sum))
        throw std::runtime_error(fmt::format("epoch {}, step {}: the loss is {} (diverged; try a smaller --lr)", epoch,
                                             trainer->steps_taken(), r.loss_sum));
      curve.steps.push_back({epoch, trainer->steps_taken() - 1, r.loss_sum / n, lr});
      pass.loss_sum += r.loss_sum;
      pass.correct += r.correct;
      pass.count += n;
      progress.update(pass.count, fmt::format("  loss {:.4f}  accuracy {:.2f}%  {:.0f} images/s", pass.loss(),
                                              100 * pass.accuracy(), double(pass.count) / seconds_since(start)));
      if (prefetch) {
        slot = 1 - slot;
        n = next_n;
      }
    }
    progress.finish();
    if (pass.count == 0) break;  // --steps ran out exactly at an epoch's end
    EpochRecord rec;
    rec.epoch = epoch;
    rec.loss = pass.loss();
    rec.accuracy = pass.accuracy();
    rec.seconds = seconds_since(start);
    rec.images_per_second = double(pass.count) / rec.seconds;
    if (val_set) {
      const Pass v = evaluate_set(*trainer, *val_set);
      rec.val_loss = v.loss();
      rec.val_accuracy = v.accuracy();
    }
    curve.epochs.push_back(rec);
    spdlog::info("epoch {}/{}: loss {:.4f}, accuracy {:.2f}%{}, {:.1f} s, {:.0f} images/s", epoch, o.epochs, rec.loss,
                 100 * rec.accuracy,
                 val_set ? fmt::format(", validation loss {:.4f}, accuracy {:.2f}%", *rec.val_loss, 100 * *rec.val_accuracy)
                         : "",
                 rec.seconds, rec.images_per_second);

    const formats::Model current = with_parameters(model, *trainer, scratch);
    if (!o.no_checkpoints)
      write_checkpoint(fmt::format("{}/epoch-{:03d}.json", checkpoints, epoch), source_json, current,
                       trainer->read_optimizer_state(),
                       {epoch, o.optimizer, o.seed, topts.max_batch, train_set.count});

    // Early stopping (Keras' EarlyStopping(monitor='val_loss', restore_best_weights=True)): the best
    // epoch is the one of lowest validation loss; stop after `patience` epochs without a new best.
    if (o.early_stopping > 0) {
      if (*rec.val_loss < best_val) {
        best_val = *rec.val_loss;
        best_params = scratch;
        curve.best_epoch = epoch;
        since_best = 0;
      } else if (++since_best >= o.early_stopping) {
        spdlog::info("early stopping: no lower validation loss for {}; keeping epoch {}", count_of(since_best, "epoch"),
                     curve.best_epoch);
        break;
      }
    } else {
      curve.best_epoch = epoch;
    }
  }

  if (o.early_stopping > 0 && !best_params.empty()) trainer->write_parameters(best_params);
  formats::Model trained = with_parameters(model, *trainer, scratch);
  nlohmann::ordered_json out_json = source_json;
  const std::string how = fmt::format(
      "trained by engine train on {} ({} samples{}), backend {}, {} lr {}{}, batch {}, epoch {} of {}, seed {}",
      train_set.source, train_set.count, augment.any() ? ", augmented " + augment.describe() : "", backend->name(),
      o.optimizer, opt.lr,
      opt.lr_decay != 0 ? fmt::format(" decay {}", opt.lr_decay)
                        : (opt.schedule == LrSchedule::Cosine ? std::string(" cosine") : std::string()),
      batch, curve.best_epoch, curve.epochs.empty() ? first_epoch - 1 : curve.epochs.back().epoch, o.seed);
  out_json["description"] = out_json.contains("description") ? out_json["description"].get<std::string>() + "; " + how : how;
  formats::write_model(o.output, out_json, trained);
  spdlog::info("wrote {} (epoch {})", o.output, curve.best_epoch);
  for (const auto& path : write_curve(base, curve, !o.no_plot)) spdlog::info("wrote {}", path);
  if (!o.no_checkpoints) spdlog::info("checkpoints in {}/", checkpoints);
  return 0;
}

}  // namespace engine::cli

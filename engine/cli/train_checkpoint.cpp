#include "engine/cli/train_checkpoint.hpp"

#include <fmt/format.h>

#include <charconv>
#include <filesystem>

#include "formats/error.hpp"
#include "formats/model_loader.hpp"
#include "formats/model_writer.hpp"
#include "formats/safetensors.hpp"

namespace engine::cli {
namespace {

template <class T>
T metadata_number(const formats::SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata.find(key);
  if (it == file.metadata.end()) throw formats::FormatError(file.path, fmt::format("no '{}' in the metadata", key));
  T value{};
  const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
  if (ec != std::errc() || end != it->second.data() + it->second.size())
    throw formats::FormatError(file.path, fmt::format("metadata '{}' is '{}', not a number", key, it->second));
  return value;
}

std::vector<float> buffer(const formats::SafetensorsFile& file, const std::string& name, int64_t count) {
  const formats::SafetensorsTensor* t = file.find(name);
  if (!t) throw formats::FormatError(file.path, fmt::format("no tensor '{}'", name));
  if (t->shape != std::vector<int64_t>{count})
    throw formats::FormatError(file.path, fmt::format("tensor '{}' is not [{}] (the model's parameter count)", name, count));
  return file.to_floats(*t);
}

}  // namespace

std::string optimizer_state_path(const std::string& checkpoint_json) {
  std::filesystem::path p(checkpoint_json);
  p.replace_extension(".optimizer.safetensors");
  return p.string();
}

void write_checkpoint(const std::string& path, const nlohmann::ordered_json& graph, const formats::Model& model,
                      const OptimizerState& state, const CheckpointRun& run) {
  const int64_t n = int64_t(state.first.size());
  // The sidecar first: a graph file present means its optimiser state is too.
  formats::write_safetensors(optimizer_state_path(path),
                             {formats::f32_tensor("first", {n}, state.first), formats::f32_tensor("second", {n}, state.second)},
                             {{"producer", "engine train"},
                              {"steps", std::to_string(state.steps)},
                              {"epoch", std::to_string(run.epoch)},
                              {"optimizer", run.optimizer},
                              {"seed", std::to_string(run.seed)},
                              {"batch", std::to_string(run.batch)},
                              {"samples", std::to_string(run.samples)}});
  formats::write_model(path, graph, model);
}

Checkpoint read_checkpoint(const std::string& path) {
  Checkpoint c;
  c.model = formats::load_model(path);
  if (!c.model.has_weights) throw formats::FormatError(path, "has no weights: not a checkpoint of engine train");
  int64_t count = 0;
  for (const formats::Node& node : c.model.nodes)
    for (const auto* t : {&node.weight, &node.bias})
      if (t->has_value()) count += formats::element_count((*t)->shape);
  const std::string sidecar = optimizer_state_path(path);
  if (!std::filesystem::exists(sidecar))
    throw formats::FormatError(path, fmt::format("no optimiser state beside it ({}): only engine train's checkpoints "
                                                 "(OUT.checkpoints/epoch-NNN.json) can be resumed",
                                                 sidecar));
  const formats::SafetensorsFile file = formats::read_safetensors(sidecar);
  c.state.first = buffer(file, "first", count);
  c.state.second = buffer(file, "second", count);
  c.state.steps = metadata_number<int64_t>(file, "steps");
  c.run.epoch = metadata_number<int>(file, "epoch");
  c.run.seed = metadata_number<uint64_t>(file, "seed");
  c.run.batch = metadata_number<int>(file, "batch");
  c.run.samples = metadata_number<int64_t>(file, "samples");
  const auto kind = file.metadata.find("optimizer");
  if (kind == file.metadata.end() || (kind->second != "sgd" && kind->second != "adam"))
    throw formats::FormatError(sidecar, "metadata 'optimizer' is missing or not sgd or adam");
  c.run.optimizer = kind->second;
  if (c.state.steps < 0 || c.run.epoch < 1 || c.run.batch < 1 || c.run.samples < 1)
    throw formats::FormatError(sidecar, "metadata out of range (steps, epoch, batch or samples)");
  return c;
}

}  // namespace engine::cli

#include "formats/model_writer.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "formats/error.hpp"
#include "formats/safetensors.hpp"
#include "formats/sha256.hpp"

namespace formats {

void write_model(const std::string& graph_path, nlohmann::ordered_json graph, const Model& model) {
  const std::filesystem::path path(graph_path);
  if (path.extension() != ".json") throw FormatError(graph_path, "a model's graph file name must end in .json");
  std::filesystem::path weights = path;
  weights.replace_extension(".safetensors");

  std::vector<TensorToWrite> tensors;
  for (const Node& node : model.nodes)
    for (const auto* t : {&node.weight, &node.bias})
      if (t->has_value()) tensors.push_back(f32_tensor((*t)->name, (*t)->shape, (*t)->values));
  write_safetensors(weights.string(), tensors, {{"producer", "engine train"}});

  graph["weights"] = {{"file", weights.filename().string()}, {"sha256", sha256_file_hex(weights.string())}};
  // "weights" belongs after "description" (or "name"), where the format's example has it; an
  // architecture-only file had none, so nlohmann appended it at the end.
  nlohmann::ordered_json ordered;
  for (auto it = graph.begin(); it != graph.end(); ++it) {
    if (it.key() == "weights") continue;
    if (it.key() == "input") ordered["weights"] = graph["weights"];
    ordered[it.key()] = it.value();
  }
  if (!ordered.contains("weights")) ordered["weights"] = graph["weights"];

  const std::string text = ordered.dump(2) + "\n";
  const std::string tmp = graph_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw FormatError(tmp, std::string("cannot open for writing: ") + std::strerror(errno));
    out.write(text.data(), std::streamsize(text.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw FormatError(tmp, "write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, graph_path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw FormatError(graph_path, "cannot move " + tmp + " into place: " + ec.message());
  }
}

}  // namespace formats

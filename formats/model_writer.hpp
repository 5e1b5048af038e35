#pragma once
// Writes a model in format v1 (the reverse of model_loader.hpp), for `engine train`: the graph
// file from JSON the caller supplies (normally the source graph file's, so every key, node and
// name stays as written) with its "weights" key set, and the weights file beside it holding every
// tensor of the model's nodes. Each file is written to PATH.tmp and renamed when complete, the
// weights first, so a graph file never names weights that are not there yet.
#include <string>

#include <nlohmann/json.hpp>

#include "formats/model.hpp"

namespace formats {

// graph_path must end in ".json"; the weights go to the same path with ".safetensors". Throws
// FormatError naming the file on any I/O problem.
void write_model(const std::string& graph_path, nlohmann::ordered_json graph, const Model& model);

}  // namespace formats

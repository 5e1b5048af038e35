#pragma once
// Reads a format v1 graph file and the weights file it names, validates everything
// (model-format-v1.md, "What a loader checks") and returns the Model. Throws FormatError.
#include <string>

#include "formats/model.hpp"

namespace formats {

Model load_model(const std::string& graph_path);

// Validates a Model built in code (tests, importers): names, DAG, tensor shapes, shape
// propagation. Sorts nodes topologically and fills output_shape / input.shape. `origin` names the
// model in error messages.
void validate_model(Model& model, const std::string& origin);

}  // namespace formats

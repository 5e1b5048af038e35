#pragma once
// What a Model that load_model() returned must satisfy (model-format-v1.md): the graph and model
// targets check it after every successful load, so a loader that lets an inconsistent model
// through is a finding even when nothing crashes.
#include "formats/model.hpp"

namespace fuzz {

void check_model(const formats::Model& model);

}  // namespace fuzz

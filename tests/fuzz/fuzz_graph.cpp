// Fuzz target: the JSON graph loader (formats::load_model on a mutated graph file). The weights
// file it names is a real one (models/*.safetensors, tests/fuzz/seeds/*.safetensors) and the
// graph's sha256 is set to that file's digest, so that mutations reach the checks behind the
// checksum: tensor roles, dtypes and shapes, shape propagation.
#include <unistd.h>

#include <string>

#include "formats/model_loader.hpp"
#include "tests/fuzz/fuzz_model_checks.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace fuzz {

int run_graph(const uint8_t* data, size_t size) {
  std::string json(reinterpret_cast<const char*>(data), size);
  const std::vector<KnownWeights>& known = known_weights();
  const std::optional<std::string> named = find_weights_file(json);
  const std::string weights_name = scratch_name_for(named);
  const KnownWeights* weights = nullptr;
  for (const KnownWeights& w : known) {
    if (w.name == weights_name) weights = &w;
  }
  if (!weights && !known.empty()) weights = &known.front();

  std::string weights_path;
  if (weights) {
    json = patch_digest(std::move(json), weights->sha256);
    weights_path = write_scratch(weights_name, weights->bytes);
  }
  // '+' is never in a weights name written to the scratch folder: the files cannot collide.
  const std::string graph_path = write_scratch(
      "graph+g.json",
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
  try {
    check_model(formats::load_model(graph_path));
  } catch (const formats::FormatError& error) {
    check_error(error, scratch_dir());
  }
  if (!weights_path.empty()) ::unlink(weights_path.c_str());
  return 0;
}

}  // namespace fuzz

#ifdef ENGINE_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::run_graph(data, size);
}
#endif

// Fuzz target: the whole model load, graph and weights both mutated. Input: the graph JSON,
// fuzz::kBlobSeparator, the weights file. The blob is written under the name the graph gives (when
// that is a plain file name) and the graph's sha256 is set to the blob's digest, so that mutations
// of the blob reach the safetensors rules and the tensor checks instead of the checksum.
#include <unistd.h>

#include <cstring>
#include <string>
#include <string_view>

#include "formats/model_loader.hpp"
#include "formats/sha256.hpp"
#include "tests/fuzz/fuzz_model_checks.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace fuzz {

int run_model(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kBlobSeparator);
  std::string json(input.substr(0, split));
  const std::span<const uint8_t> blob =
      split == std::string_view::npos
          ? std::span<const uint8_t>()
          : std::span<const uint8_t>(data + split + std::strlen(kBlobSeparator),
                                     size - split - std::strlen(kBlobSeparator));

  const std::string weights_name = scratch_name_for(find_weights_file(json));
  json = patch_digest(std::move(json), formats::sha256_hex(blob));
  const std::string weights_path = write_scratch(weights_name, blob);
  const std::string graph_path = write_scratch(
      "graph+m.json",
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
  try {
    check_model(formats::load_model(graph_path));
  } catch (const formats::FormatError& error) {
    check_error(error, scratch_dir());
  }
  ::unlink(weights_path.c_str());
  return 0;
}

}  // namespace fuzz

#ifdef ENGINE_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::run_model(data, size);
}
#endif

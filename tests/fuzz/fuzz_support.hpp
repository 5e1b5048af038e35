#pragma once
// Shared by the libFuzzer targets (fuzz_*.cpp) and by the regression replay test
// (tests/regressions/replay_test.cpp), which calls the same entry points without libFuzzer.
//
// The contract every target checks: the code under test returns normally or throws
// formats::FormatError whose message names the file and says what is wrong. Any other exception,
// a crash, a sanitizer report, a hang (libFuzzer -timeout) or an allocation over the limit
// (-rss_limit_mb / -malloc_limit_mb) is a finding.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/error.hpp"

namespace fuzz {

using Bytes = std::vector<uint8_t>;

// The fuzz targets; each returns 0 (libFuzzer's convention) and lets only non-FormatError
// exceptions escape.
int run_graph(const uint8_t* data, size_t size);        // graph JSON, fixed real weights
int run_safetensors(const uint8_t* data, size_t size);  // safetensors bytes
int run_model(const uint8_t* data, size_t size);        // graph JSON + kBlobSeparator + weights
int run_idx(const uint8_t* data, size_t size);          // IDX images/labels, raw or gzip
int run_image(const uint8_t* data, size_t size);        // PNG / JPEG / PGM (and read_images' sniffing)

struct Target {
  const char* name;  // folder name under tests/regressions/ and the fuzzer's name (fuzz_NAME)
  int (*run)(const uint8_t*, size_t);
};
inline constexpr Target kTargets[] = {
    {"graph", run_graph}, {"safetensors", run_safetensors}, {"model", run_model},
    {"idx", run_idx},     {"image", run_image},
};

// run_model's input: the graph JSON, this separator, then the weights file's bytes. Without the
// separator the whole input is the graph and the weights file is empty.
inline constexpr char kBlobSeparator[] = "\n#--weights--#\n";

// A private folder for the files a target writes (the readers take paths), created on first use
// under $FUZZ_SCRATCH, /dev/shm or the temp dir, and removed at exit.
const std::string& scratch_dir();
// Writes `bytes` to scratch_dir()/name and returns the path.
std::string write_scratch(const std::string& name, std::span<const uint8_t> bytes);

// The graph's weights file name and digest, found textually (a mutated graph may not parse).
// patch_digest() replaces a 64-character "sha256" string with `digest` so that mutations get past
// the checksum to the rules behind it; anything else is left as it is.
std::optional<std::string> find_weights_file(const std::string& json);
std::string patch_digest(std::string json, const std::string& digest);
// A weights file name safe to create in scratch_dir(), or "weights.safetensors".
std::string scratch_name_for(const std::optional<std::string>& file);

// Weights files the graph target resolves its graphs against: every *.safetensors in
// ENGINE_SOURCE_DIR/models, tests/fuzz/seeds and the folders in $FUZZ_WEIGHTS_DIRS (':'-separated),
// by file name.
struct KnownWeights {
  std::string name;
  Bytes bytes;
  std::string sha256;
};
const std::vector<KnownWeights>& known_weights();

// The checks made on every FormatError: it names a file that starts with `file_prefix` (the file
// read, or for a model either of its files), its message is "<file>: <problem>", and the problem
// is non-empty text on one line or more without NUL bytes.
void check_error(const formats::FormatError& error, const std::string& file_prefix);

// Aborts (a finding) with a message when `condition` is false.
void require(bool condition, const char* what);

}  // namespace fuzz

#include "tests/fuzz/fuzz_support.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "formats/sha256.hpp"
#include "formats/strict_json.hpp"

namespace fuzz {
namespace fs = std::filesystem;

#ifndef ENGINE_SOURCE_DIR
#define ENGINE_SOURCE_DIR "."
#endif

void require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "FUZZ CHECK FAILED: %s\n", what);
  std::abort();
}

namespace {

std::string make_scratch_dir() {
  std::vector<fs::path> bases;
  if (const char* env = std::getenv("FUZZ_SCRATCH"); env && *env) bases.emplace_back(env);
  bases.emplace_back("/dev/shm");
  std::error_code ec;
  bases.push_back(fs::temp_directory_path(ec));
  for (const fs::path& base : bases) {
    if (base.empty() || !fs::is_directory(base, ec)) continue;
    std::string pattern = (base / "engine-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data())) return pattern;
  }
  std::fprintf(stderr, "fuzz: cannot create a scratch folder\n");
  std::abort();
}

std::string* g_scratch = nullptr;

void remove_scratch() {
  if (!g_scratch) return;
  std::error_code ignored;
  fs::remove_all(*g_scratch, ignored);
}

// Position just after `"key"` `:` and the opening quote of a string value, or npos.
size_t string_value_start(const std::string& json, const char* key) {
  const std::string quoted = std::string("\"") + key + "\"";
  size_t at = json.find(quoted);
  if (at == std::string::npos) return std::string::npos;
  at += quoted.size();
  while (at < json.size() && std::strchr(" \t\r\n", json[at])) ++at;
  if (at >= json.size() || json[at] != ':') return std::string::npos;
  ++at;
  while (at < json.size() && std::strchr(" \t\r\n", json[at])) ++at;
  if (at >= json.size() || json[at] != '"') return std::string::npos;
  return at + 1;
}

Bytes read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

const std::string& scratch_dir() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_scratch = new std::string(make_scratch_dir());
    std::atexit(remove_scratch);
  });
  return *g_scratch;
}

std::string write_scratch(const std::string& name, std::span<const uint8_t> bytes) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* file = std::fopen(path.c_str(), "wb");
  require(file != nullptr, "cannot create a scratch file");
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), file);
  require(std::fclose(file) == 0 && written == bytes.size(), "cannot write a scratch file");
  return path;
}

std::optional<std::string> find_weights_file(const std::string& json) {
  const size_t start = string_value_start(json, "file");
  if (start == std::string::npos) return std::nullopt;
  const size_t end = json.find('"', start);
  if (end == std::string::npos) return std::nullopt;
  return json.substr(start, end - start);
}

std::string patch_digest(std::string json, const std::string& digest) {
  const size_t start = string_value_start(json, "sha256");
  if (start == std::string::npos || digest.size() != 64) return json;
  const size_t end = json.find('"', start);
  if (end == std::string::npos || end - start != 64) return json;
  json.replace(start, 64, digest);
  return json;
}

std::string scratch_name_for(const std::optional<std::string>& file) {
  if (!file || file->empty() || file->size() > 64 || *file == "." || *file == "..") {
    return "weights.safetensors";
  }
  for (char c : *file) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return "weights.safetensors";
  }
  return *file;
}

const std::vector<KnownWeights>& known_weights() {
  static const std::vector<KnownWeights> weights = [] {
    std::vector<fs::path> dirs{fs::path(ENGINE_SOURCE_DIR) / "models",
                               fs::path(ENGINE_SOURCE_DIR) / "tests" / "fuzz" / "seeds"};
    if (const char* env = std::getenv("FUZZ_WEIGHTS_DIRS")) {
      std::string list = env;
      size_t begin = 0;
      while (begin <= list.size()) {
        const size_t end = std::min(list.find(':', begin), list.size());
        if (end > begin) dirs.emplace_back(list.substr(begin, end - begin));
        begin = end + 1;
      }
    }
    std::vector<KnownWeights> found;
    std::set<std::string> names;
    for (const fs::path& dir : dirs) {
      std::error_code ec;
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path& path = it->path();
        if (path.extension() != ".safetensors" || !it->is_regular_file(ec)) continue;
        if (!names.insert(path.filename().string()).second) continue;  // first folder wins
        KnownWeights w{path.filename().string(), read_all(path), {}};
        w.sha256 = formats::sha256_hex(w.bytes);
        found.push_back(std::move(w));
      }
    }
    return found;
  }();
  return weights;
}

void check_error(const formats::FormatError& error, const std::string& file_prefix) {
  const std::string what = error.what();
  require(!error.file().empty(), "FormatError names no file");
  require(error.file().rfind(file_prefix, 0) == 0, "FormatError names an unexpected file");
  // The file as printed: control bytes and broken UTF-8 in a path are escaped like the problem's.
  require(what.rfind(formats::printable_text(error.file()) + ": ", 0) == 0,
          "FormatError message does not start with its file");
  require(!error.problem().empty(), "FormatError has an empty problem");
  // Printed as one line on a terminal: quoted input must not bring raw bytes with it.
  require(error.problem().find('\0') == std::string::npos, "FormatError message contains a NUL byte");
  require(!formats::find_invalid_utf8(what), "FormatError message is not valid UTF-8");
}

}  // namespace fuzz

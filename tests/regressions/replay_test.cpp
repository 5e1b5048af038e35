// Replays every committed fuzz seed (tests/fuzz/seeds/NAME) and every input a fuzzer once failed
// on (tests/regressions/NAME) through the fuzz target's own entry point: each must be accepted or
// rejected with a FormatError naming the file, with no other exception (and, in the sanitizer
// build, no sanitizer report). A new crasher becomes a regression by copying it into
// tests/regressions/NAME/ under a name that says what it broke.
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.hpp"

namespace fuzz {
// gtest prints a parameter without a printer as its raw bytes, pointers included, and
// gtest_discover_tests puts that print ("# GetParam() = 16-byte object <...>") in the ctest name:
// names that changed from build to build. The target's name is stable and says which it is.
void PrintTo(const Target& target, std::ostream* out) { *out << target.name; }
}  // namespace fuzz

namespace {
namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(const std::string& target) {
  std::vector<fs::path> files;
  for (const fs::path& dir : {fs::path(ENGINE_SOURCE_DIR) / "tests" / "fuzz" / "seeds" / target,
                              fs::path(ENGINE_SOURCE_DIR) / "tests" / "regressions" / target}) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (it->is_regular_file() && name[0] != '.' && it->path().extension() != ".md") {
        files.push_back(it->path());
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

fuzz::Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return fuzz::Bytes(std::istreambuf_iterator<char>(in), {});
}

class Replay : public ::testing::TestWithParam<fuzz::Target> {};

TEST_P(Replay, EveryInputIsAcceptedOrRejectedCleanly) {
  const fuzz::Target target = GetParam();
  const std::vector<fs::path> files = inputs_of(target.name);
  if (files.empty()) GTEST_SKIP() << "no seeds or regression inputs for " << target.name;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const fuzz::Bytes bytes = read_file(file);
    try {
      target.run(bytes.data(), bytes.size());
    } catch (const std::exception& error) {
      ADD_FAILURE() << "escaped exception (not a FormatError): " << error.what();
    } catch (...) {
      ADD_FAILURE() << "escaped exception of unknown type";
    }
  }
}

TEST(ReplayNames, ParametersPrintAsTheTargetName) {
  EXPECT_EQ(::testing::PrintToString(fuzz::kTargets[0]), "graph");
  EXPECT_EQ(::testing::PrintToString(fuzz::kTargets[3]), "idx");
}

INSTANTIATE_TEST_SUITE_P(Fuzz, Replay, ::testing::ValuesIn(fuzz::kTargets),
                         [](const ::testing::TestParamInfo<fuzz::Target>& param) {
                           return std::string(param.param.name);
                         });

}  // namespace

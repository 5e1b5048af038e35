#pragma once
// Runs the built `engine` command (ENGINE_BINARY) the way a user does and captures what it says.
#include <string>
#include <vector>

namespace cli_test {

struct EngineResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

EngineResult run_engine(const std::vector<std::string>& args, const std::string& scratch_dir);

std::string read_text(const std::string& path);

}  // namespace cli_test

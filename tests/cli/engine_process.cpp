#include "tests/cli/engine_process.hpp"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cli_test {
namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

EngineResult run_engine(const std::vector<std::string>& args, const std::string& scratch_dir) {
  const std::string out_path = scratch_dir + "/engine.stdout", err_path = scratch_dir + "/engine.stderr";
  std::string command = shell_quote(ENGINE_BINARY);
  for (const auto& a : args) command += " " + shell_quote(a);
  command += " >" + shell_quote(out_path) + " 2>" + shell_quote(err_path) + " </dev/null";
  const int status = std::system(command.c_str());
  if (status == -1) throw std::runtime_error("cannot start a shell for: " + command);
  EngineResult r;
  // A crash (signal) must not look like an exit code the CLI chose.
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  return r;
}

}  // namespace cli_test

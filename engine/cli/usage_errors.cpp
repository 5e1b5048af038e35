#include "engine/cli/usage_errors.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fmt/format.h>

// What this relies on: an argument that no (sub)command accepts is kept, in command-line order, in
// App::remaining() of the command that gave up on it, and parsing goes on to the end before
// "A subcommand is required" or "not expected" is thrown. That is App::_move_to_missing in CLI11
// 2.1 (Debian 12) through 2.4 and later; CLI11 1.x words errors and requirements differently.
// tests/cli/cli_test.cpp (UnknownCommandAndOptionAreNamed) checks the result with the CLI11 built
// against.
static_assert(CLI11_VERSION_MAJOR >= 2, "engine/cli/usage_errors.cpp expects CLI11 2.x");

namespace engine::cli {
namespace {

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("rnu" → "run" is 1).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The command the user reached, e.g. "engine run" or "engine bench ops", and that (sub)command.
const CLI::App* deepest_command(const CLI::App& app, std::string& path) {
  path = "engine";
  const CLI::App* command = &app;
  for (;;) {
    const auto parsed = command->get_subcommands();
    if (parsed.empty()) return command;
    command = parsed.front();
    path += " " + command->get_name();
  }
}

// Every spelling of every option `command` accepts, its parents' included (the engine's commands
// fall through to the top level for -v/-q).
std::vector<std::string> option_spellings(const CLI::App* command) {
  std::vector<std::string> names;
  for (const CLI::App* c = command; c != nullptr; c = c->get_parent()) {
    for (const CLI::Option* option : c->get_options()) {
      for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
      for (const std::string& name : option->get_snames()) names.push_back("-" + name);
    }
  }
  return names;
}

std::string suggestion(const std::optional<std::string>& match) {
  return match ? fmt::format(" (did you mean '{}'?)", *match) : std::string();
}

}  // namespace

std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 3;  // more than 2 edits is a different word, not a typo
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance && distance < word.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::optional<std::string> unrecognised_argument_message(const CLI::App& app) {
  const std::vector<std::string> extras = app.remaining(true);
  if (extras.empty()) return std::nullopt;
  std::string path;
  const CLI::App* command = deepest_command(app, path);

  // An unknown option first, wherever it stands: "--limt 5" leaves "5" unclaimed too, and naming
  // the option is what helps.
  for (const std::string& arg : extras) {
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") continue;
    const std::string name = arg.substr(0, arg.find('='));  // "--limt=5" → "--limt"
    return fmt::format("unknown option '{}'{} (see {} --help)", name,
                       suggestion(closest_match(name, option_spellings(command))), path);
  }
  if (command == &app) {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      commands.push_back(sub->get_name());
    return fmt::format("unknown command '{}'{} (see engine --help)", extras.front(),
                       suggestion(closest_match(extras.front(), commands)));
  }
  return fmt::format("unexpected argument '{}' (see {} --help)", extras.front(), path);
}

}  // namespace engine::cli

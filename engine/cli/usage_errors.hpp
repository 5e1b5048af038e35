#pragma once
// Usage errors about words the parser did not recognise, named by the word itself. CLI11 reports
// `engine rnu` as "A subcommand is required" and `run ... --limt 5` as "arguments were not
// expected: 5 --limt"; this says "unknown command 'rnu' (did you mean 'run'?)" and "unknown option
// '--limt' (did you mean '--limit'?)".
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace engine::cli {

// The message for a failed parse of `app`, when the failure is about an argument nothing accepted
// (CLI11 keeps those in App::remaining()); nullopt otherwise, and CLI11's own message stands.
std::optional<std::string> unrecognised_argument_message(const CLI::App& app);

// The candidate closest to `word` (at most 2 edits, adjacent swaps counting as one, and fewer edits
// than the word has letters), or nullopt.
std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace engine::cli

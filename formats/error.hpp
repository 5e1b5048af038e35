#pragma once
// One exception type for every problem found in an input file. The message always starts with the
// file's path, so the CLI can print it as-is: "models/x.json: node 'c1': weight has shape ...".
#include <stdexcept>
#include <string>

namespace formats {

class FormatError : public std::runtime_error {
 public:
  FormatError(const std::string& file, const std::string& problem)
      : std::runtime_error(file + ": " + problem), file_(file), problem_(problem) {}
  const std::string& file() const { return file_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::string problem_;
};

}  // namespace formats

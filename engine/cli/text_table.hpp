#pragma once
// Plain-text output helpers: column-aligned tables and grouped digits ("61,706").
#include <cstdint>
#include <string>
#include <vector>

namespace engine::cli {

std::string group_thousands(int64_t n);

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns padded to their widest cell; columns listed in `right_aligned` are numbers.
  std::string render(const std::vector<size_t>& right_aligned = {}, const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace engine::cli

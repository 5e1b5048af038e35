#include "engine/cli/text_table.hpp"

#include <algorithm>

namespace engine::cli {

std::string group_thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = int(digits.size()) - 3; i > 0; i -= 3) digits.insert(size_t(i), ",");
  return n < 0 ? "-" + digits : digits;
}

std::string TextTable::render(const std::vector<size_t>& right_aligned, const std::string& indent) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool right = std::find(right_aligned.begin(), right_aligned.end(), c) != right_aligned.end();
      const std::string pad(widths[c] - row[c].size(), ' ');
      line += right ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
      if (c + 1 < row.size()) line += "  ";
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace engine::cli

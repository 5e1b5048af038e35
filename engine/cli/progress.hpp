#pragma once
// A one-line progress bar on stderr, drawn only when stderr is a terminal: logs and redirected
// output stay free of carriage returns.
#include <chrono>
#include <cstdint>
#include <string>

namespace engine::cli {

class ProgressBar {
 public:
  // Draws nothing unless `wanted` and stderr is a terminal.
  ProgressBar(int64_t total, bool wanted);
  ~ProgressBar();
  // `suffix` follows the counts on the same line (engine train: loss, accuracy, images/s).
  void update(int64_t done, const std::string& suffix = {});
  void finish();  // erases the bar

 private:
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace engine::cli

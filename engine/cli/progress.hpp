#pragma once
// Progress on stderr. On a terminal: a one-line bar, redrawn in place. Elsewhere (a log file, a
// pipe, a batch job): nothing, or, when asked, a plain log line every few seconds, so a long run
// shows it is alive without filling the log with carriage returns.
#include <chrono>
#include <cstdint>
#include <string>

namespace engine::cli {

class ProgressBar {
 public:
  // Draws nothing unless `wanted`. Not a terminal: a log line every `line_seconds` (0: none),
  // starting with `what` ("epoch 2/5").
  ProgressBar(int64_t total, bool wanted, double line_seconds = 0, std::string what = {});
  ~ProgressBar();
  // `suffix` follows the counts on the same line (engine train: loss, accuracy, images/s).
  void update(int64_t done, const std::string& suffix = {});
  void finish();  // erases the bar

 private:
  int64_t total_;
  bool bar_;             // a terminal: the bar
  double line_seconds_;  // not a terminal: log lines this often; 0: none
  std::string what_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace engine::cli

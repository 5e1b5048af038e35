#include "engine/cli/progress.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace engine::cli {

ProgressBar::ProgressBar(int64_t total, bool wanted, double line_seconds, std::string what)
    : total_(total),
      bar_(wanted && total > 0 && isatty(STDERR_FILENO) == 1),
      line_seconds_(wanted && total > 0 && !bar_ ? line_seconds : 0),
      what_(std::move(what)),
      last_draw_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, const std::string& suffix) {
  const auto now = std::chrono::steady_clock::now();
  if (line_seconds_ > 0) {
    // The last update is the caller's own summary line's to report.
    if (done >= total_ || now - last_draw_ < std::chrono::duration<double>(line_seconds_)) return;
    last_draw_ = now;
    spdlog::info("{}{}{}/{} images{}", what_, what_.empty() ? "" : ": ", done, total_, suffix);
    return;
  }
  if (!bar_) return;
  // Redrawing ten times a second is smooth enough and costs nothing next to the work measured.
  if (drawn_ && done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = int(done * kWidth / total_);
  const std::string bar = std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.');
  std::fprintf(stderr, "\r[%s] %3d%% %lld/%lld images%s\033[K", bar.c_str(), int(done * 100 / total_),
               static_cast<long long>(done), static_cast<long long>(total_), suffix.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace engine::cli

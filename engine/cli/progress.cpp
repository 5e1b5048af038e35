#include "engine/cli/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace engine::cli {

ProgressBar::ProgressBar(int64_t total, bool wanted)
    : total_(total), enabled_(wanted && total > 0 && isatty(STDERR_FILENO) == 1) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, const std::string& suffix) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
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

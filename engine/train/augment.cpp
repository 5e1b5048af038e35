#include "engine/train/augment.hpp"

#include <cstring>
#include <stdexcept>

namespace engine::train {

std::string AugmentOptions::describe() const {
  if (!any()) return "none";
  std::string s;
  if (shift > 0) s = "shift=" + std::to_string(shift);
  if (flip) s += s.empty() ? "flip" : ",flip";
  return s;
}

AugmentOptions parse_augment(const std::string& spec) {
  AugmentOptions o;
  if (spec.empty() || spec == "none") return o;
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t comma = spec.find(',', begin);
    if (comma == std::string::npos) comma = spec.size();
    const std::string part = spec.substr(begin, comma - begin);
    begin = comma + 1;
    if (part == "flip") {
      o.flip = true;
    } else if (part.rfind("shift=", 0) == 0) {
      const std::string n = part.substr(6);
      size_t used = 0;
      int v = -1;
      try {
        v = std::stoi(n, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (n.empty() || used != n.size() || v < 1 || v > 64)
        throw std::invalid_argument("--augment " + spec + ": shift wants a whole number of pixels from 1 to 64, not '" +
                                    n + "'");
      o.shift = v;
    } else {
      throw std::invalid_argument("--augment " + spec + ": unknown transform '" + part +
                                  "' (known: shift=N, flip, none; separated by commas)");
    }
  }
  return o;
}

Augmenter::Augmenter(const AugmentOptions& options, int64_t channels, int64_t height, int64_t width,
                     size_t element_bytes, uint64_t seed)
    : options_(options), c_(channels), h_(height), w_(width), elem_(element_bytes), rng_(augment_stream(seed)) {
  scratch_.resize(size_t(c_ * h_ * w_) * elem_);
}

void Augmenter::apply(uint8_t* sample) {
  int64_t dy = 0, dx = 0;
  if (options_.shift > 0) {
    const uint64_t span = uint64_t(2 * options_.shift + 1);
    dy = int64_t(rng_.next() % span) - options_.shift;
    dx = int64_t(rng_.next() % span) - options_.shift;
  }
  const bool flip = options_.flip && (rng_.next() >> 63) != 0;
  if (dy == 0 && dx == 0 && !flip) return;
  std::memcpy(scratch_.data(), sample, scratch_.size());
  const auto* src = reinterpret_cast<const uint8_t*>(scratch_.data());
  // out(y, x) = in(y - dy, xs) with xs = x - dx, mirrored first when flipping: the flip is applied
  // to the shifted image, as RandomCrop then RandomHorizontalFlip would.
  for (int64_t c = 0; c < c_; ++c) {
    for (int64_t y = 0; y < h_; ++y) {
      uint8_t* out_row = sample + size_t((c * h_ + y) * w_) * elem_;
      const int64_t sy = y - dy;
      if (sy < 0 || sy >= h_) {
        std::memset(out_row, 0, size_t(w_) * elem_);
        continue;
      }
      const uint8_t* in_row = src + size_t((c * h_ + sy) * w_) * elem_;
      for (int64_t x = 0; x < w_; ++x) {
        const int64_t sx = (flip ? w_ - 1 - x : x) - dx;
        if (sx < 0 || sx >= w_)
          std::memset(out_row + size_t(x) * elem_, 0, elem_);
        else
          std::memcpy(out_row + size_t(x) * elem_, in_row + size_t(sx) * elem_, elem_);
      }
    }
  }
}

}  // namespace engine::train

#pragma once
// Data augmentation for `engine train`, on the host, on raw samples (the model's input bytes before
// its preprocessing), so every backend trains on the same augmented batches: what torchvision's
// RandomCrop(H, padding=s) (fill 0) and RandomHorizontalFlip() do, drawn from the run's seed.
//
//   shift=S  translate each sample by (dy, dx), each uniform in [-S, S], filling with 0 (the raw
//            background value of MNIST-style images); RandomCrop(H, padding=S) gives the same
//            distribution of shifts.
//   flip     mirror each sample left-right with probability 1/2.
// Per sample, in this order: dy = next() % (2S+1) - S, dx likewise, then flip = next() >> 63
// (the draws of a disabled transform are skipped). One SplitMix64 stream (augment_stream(seed))
// for the whole run, so a seed gives the same augmented batches on every machine and backend.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/train/random.hpp"

namespace engine::train {

struct AugmentOptions {
  int shift = 0;       // pixels, 0 = off
  bool flip = false;
  bool any() const { return shift > 0 || flip; }
  std::string describe() const;  // "shift=2,flip", or "none"
};

// "shift=2", "flip", "shift=2,flip", "none" or "". Throws std::invalid_argument naming the bad part.
AugmentOptions parse_augment(const std::string& spec);

inline uint64_t augment_stream(uint64_t seed) { return seed ^ 0xA06E7C0DE5ull; }

// Augments samples of shape [channels, height, width] with elements of `element_bytes` bytes
// (uint8: 1, float32: 4), in place.
class Augmenter {
 public:
  Augmenter(const AugmentOptions& options, int64_t channels, int64_t height, int64_t width, size_t element_bytes,
            uint64_t seed);
  void apply(uint8_t* sample);  // one sample, channels * height * width elements

 private:
  AugmentOptions options_;
  int64_t c_, h_, w_;
  size_t elem_;
  SplitMix64 rng_;
  std::string scratch_;  // one sample's copy (no allocation per call)
};

}  // namespace engine::train

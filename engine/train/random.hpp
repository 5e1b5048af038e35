#pragma once
// The one random generator of training, so that a seed means the same numbers on every machine,
// compiler and standard library (std::uniform_real_distribution and std::shuffle are
// implementation-defined): SplitMix64 (Steele, Lea, Flood 2014), 64-bit state, and the two uses
// of it written out. docs/design/training.md gives the same in a few lines of Python.
#include <cstdint>
#include <numeric>
#include <vector>

namespace engine::train {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1): the top 53 bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Streams derived from the user's seed: one for initialisation, one for the order of samples.
inline uint64_t init_stream(uint64_t seed) { return seed; }
inline uint64_t shuffle_stream(uint64_t seed) { return seed ^ 0x5A17C0FFEEull; }

// Fisher-Yates from the back: for i = n-1 .. 1, swap order[i] with order[next() % (i + 1)] (the
// modulo's bias is below 2^-40 for any data set that fits in memory).
inline void shuffle(std::vector<int64_t>& order, SplitMix64& rng) {
  for (int64_t i = int64_t(order.size()) - 1; i > 0; --i) {
    const int64_t j = int64_t(rng.next() % uint64_t(i + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
}

}  // namespace engine::train

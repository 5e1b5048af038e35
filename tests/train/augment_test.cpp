// Augmentation (engine/train/augment.hpp) and the cosine learning-rate schedule (optimizer.hpp):
// each transform checked against its definition on random samples of odd sizes, every shift of the
// range drawn, flips about half the time, the draws pinned to the documented SplitMix64 recipe.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "engine/core/optimizer.hpp"
#include "engine/train/augment.hpp"

namespace {

using engine::train::AugmentOptions;
using engine::train::Augmenter;
using engine::train::parse_augment;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(1 + rng() % 255);  // never 0, so the zero fill is visible
  return v;
}

// in translated by (dy, dx), mirrored afterwards when `flip`: the definition, element by element.
std::vector<uint8_t> expected(const std::vector<uint8_t>& in, int c, int h, int w, size_t elem, int dy, int dx, bool flip) {
  std::vector<uint8_t> out(in.size(), 0);
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int xs = flip ? w - 1 - x : x;  // the column of the shifted image
        const int sy = y - dy, sx = xs - dx;
        if (sy < 0 || sy >= h || sx < 0 || sx >= w) continue;
        std::memcpy(&out[((size_t(ch) * h + y) * w + x) * elem], &in[((size_t(ch) * h + sy) * w + sx) * elem], elem);
      }
  return out;
}

TEST(Augment, ParsesTheDocumentedSpellingsAndRefusesOthers) {
  EXPECT_FALSE(parse_augment("").any());
  EXPECT_FALSE(parse_augment("none").any());
  EXPECT_EQ(parse_augment("shift=2").shift, 2);
  const AugmentOptions both = parse_augment("shift=3,flip");
  EXPECT_EQ(both.shift, 3);
  EXPECT_TRUE(both.flip);
  EXPECT_EQ(both.describe(), "shift=3,flip");
  EXPECT_EQ(parse_augment("flip").describe(), "flip");
  for (const char* bad : {"shift=", "shift=0", "shift=-1", "shift=2x", "shift=65", "rotate", "flip,", "shift=2,,flip"}) {
    EXPECT_THROW(parse_augment(bad), std::invalid_argument) << bad;
  }
  try {
    parse_augment("shift=2,rotate=5");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown transform 'rotate=5'"), std::string::npos) << e.what();
  }
}

// Every output is the input under one (dy, dx, flip) of the allowed set, and the draws are exactly
// the documented ones: dy, dx = next() % (2S+1) - S, then flip = next() >> 63.
void check_against_definition(int c, int h, int w, size_t elem, AugmentOptions o, uint64_t seed) {
  Augmenter aug(o, c, h, w, elem, seed);
  engine::train::SplitMix64 rng(engine::train::augment_stream(seed));
  std::set<std::pair<int, int>> shifts;
  int flips = 0;
  const int samples = 400;
  for (int i = 0; i < samples; ++i) {
    const auto in = random_bytes(size_t(c * h * w) * elem, uint32_t(i) + 7);
    auto out = in;
    aug.apply(out.data());
    int dy = 0, dx = 0;
    if (o.shift > 0) {
      dy = int(rng.next() % uint64_t(2 * o.shift + 1)) - o.shift;
      dx = int(rng.next() % uint64_t(2 * o.shift + 1)) - o.shift;
    }
    const bool flip = o.flip && (rng.next() >> 63) != 0;
    ASSERT_EQ(out, expected(in, c, h, w, elem, dy, dx, flip)) << "sample " << i << " dy " << dy << " dx " << dx;
    shifts.insert({dy, dx});
    flips += flip;
  }
  if (o.shift > 0) EXPECT_EQ(shifts.size(), size_t((2 * o.shift + 1) * (2 * o.shift + 1)));
  if (o.flip) {
    EXPECT_GT(flips, samples * 4 / 10);
    EXPECT_LT(flips, samples * 6 / 10);
  }
}

TEST(Augment, ShiftsMatchTheDefinitionOnOddShapes) {
  check_against_definition(1, 28, 28, 1, parse_augment("shift=2"), 0);
  check_against_definition(3, 7, 5, 1, parse_augment("shift=1"), 11);
}

TEST(Augment, FlipsAndShiftsMatchTheDefinitionForBytesAndFloats) {
  check_against_definition(1, 9, 13, 1, parse_augment("flip"), 3);
  check_against_definition(2, 11, 6, 4, parse_augment("shift=3,flip"), 5);  // float32 elements move whole
}

TEST(Augment, SameSeedSameSamplesAnotherSeedOthers) {
  const auto in = random_bytes(28 * 28, 1);
  auto run = [&](uint64_t seed) {
    Augmenter aug(parse_augment("shift=2,flip"), 1, 28, 28, 1, seed);
    std::vector<uint8_t> all;
    for (int i = 0; i < 50; ++i) {
      auto s = in;
      aug.apply(s.data());
      all.insert(all.end(), s.begin(), s.end());
    }
    return all;
  };
  EXPECT_EQ(run(4), run(4));
  EXPECT_NE(run(4), run(5));
}

TEST(Schedule, CosineWithWarmupFollowsLambdaLR) {
  engine::OptimizerOptions o;
  o.lr = 0.002;
  o.schedule = engine::LrSchedule::Cosine;
  o.cosine_steps = 100;
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(o, 0), 0.002);
  EXPECT_NEAR(engine::scheduled_lr(o, 50), 0.001, 1e-15);
  EXPECT_NEAR(engine::scheduled_lr(o, 99), 0.001 * (1 + std::cos(M_PI * 0.99)), 1e-15);
  EXPECT_EQ(engine::scheduled_lr(o, 100), 0.0);
  o.warmup_steps = 10;  // scripts/train_seed_models.py's factor: (t + 1) / W, then cosine over T - W
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(o, 0), 0.002 / 10);
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(o, 9), 0.002);
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(o, 10), 0.002);
  EXPECT_NEAR(engine::scheduled_lr(o, 55), 0.001, 1e-15);
  EXPECT_EQ(engine::scheduled_lr(o, 100), 0.0);
  o.schedule = engine::LrSchedule::InverseTime;  // the default is unchanged
  o.lr_decay = 5e-5;
  EXPECT_DOUBLE_EQ(engine::scheduled_lr(o, 1000), 0.002 / 1.05);
}

}  // namespace

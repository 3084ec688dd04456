// The host sampler's draw (worker/gumbel_draw.h): the noise bounds against
// every uniform Philox can give, and the pruned, vectorized draw against the
// plain Gumbel-max over every token, at each SIMD level. Built into
// worker_sampler_test.

#include "worker/gumbel_draw.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops/philox.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {
namespace {

float NoiseOfToken(uint64_t seed, uint64_t index, size_t i) {
  return GumbelNoise(kernels::PhiloxDraws(seed, index, i / 4).v[i % 4]);
}

float LoadForTest(float x) { return std::isnan(x) ? -INFINITY : x; }

// The rule with nothing skipped: fma(x - max, 1 / T, noise) of every token
// at or above min_key (not -inf or NaN), the first of the best. -1 if none.
int32_t PlainGumbelMax(const std::vector<float>& logits, float temperature, uint32_t min_key,
                       uint64_t seed, uint64_t index) {
  float max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max(max_logit, LoadForTest(x));
  const float inv_t = 1.0f / temperature;
  float best = -INFINITY;
  int32_t best_id = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = LoadForTest(logits[i]);
    if (x == -INFINITY || OrderedFloatKey(x) < min_key) continue;
    const float score = std::fma(x - max_logit, inv_t, NoiseOfToken(seed, index, i));
    if (best_id < 0 || score > best) {
      best = score;
      best_id = static_cast<int32_t>(i);
    }
  }
  return best_id;
}

// The draw as the sampler calls it, at `level`.
int32_t DrawAtLevel(const std::vector<float>& logits, float temperature, uint32_t min_key,
                    uint64_t seed, uint64_t index, SimdLevel level) {
  int32_t argmax = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (LoadForTest(logits[i]) > LoadForTest(logits[argmax])) argmax = static_cast<int32_t>(i);
  }
  return GumbelMaxDraw(logits, argmax, min_key, LoadForTest(logits[argmax]), 1.0f / temperature,
                       seed, index, level);
}

// UniformOpen01 reads a word's top 23 bits: every one of its 2^23 uniforms,
// through the float logs the draw uses, is at most its bucket's bound, and
// each bound is within 2^-9 of its bucket's largest noise.
TEST(GumbelDrawTest, NoiseBoundsCoverEveryUniformAndAreTight) {
  const float* bounds = GumbelNoiseBounds();
  std::vector<float> largest(kGumbelBoundBuckets, -INFINITY);
  for (uint32_t k = 0; k < (1u << 23); ++k) {
    const uint32_t bits = k << 9;
    const float noise = GumbelNoise(bits);
    const uint32_t bucket = bits >> kGumbelBoundShift;
    if (!(noise <= bounds[bucket])) {
      FAIL() << "uniform " << k << ": noise " << noise << " above its bound " << bounds[bucket];
    }
    largest[bucket] = std::max(largest[bucket], noise);
  }
  for (int bucket = 0; bucket < kGumbelBoundBuckets; ++bucket) {
    ASSERT_LE(bounds[bucket] - largest[bucket], 0x1p-9f) << "bucket " << bucket;
  }
  // The low 9 bits of a word do not move its uniform.
  EXPECT_EQ(GumbelNoise(0xFFFFFFFFu), GumbelNoise(0xFFFFFE00u));
  EXPECT_EQ(GumbelNoise(0x1FFu), GumbelNoise(0u));
}

// 128,256-token rows (Llama 3's vocabulary): N(0, 3) with NaN and -inf
// entries; the same with one token 12 above the rest (most blocks then out
// of reach, their Philox skipped); a few distinct values, many equal. At
// temperatures 0.7, 1 and 2.5, with and without a min_key (top-k/top-p's
// cut), over many seeds: every level draws the plain rule's token.
TEST(GumbelDrawTest, LargeVocabularyDrawIsThePlainGumbelMaxAtEveryLevel) {
  std::mt19937 rng(46);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> spread(128256), flat(128256);
  for (size_t i = 0; i < spread.size(); ++i) {
    spread[i] = i % 1001 == 17 ? NAN : i % 997 == 5 ? -INFINITY : normal(rng);
    flat[i] = 0.25f * std::round(normal(rng) * 0.1f);  // Few distinct values, many equal.
  }
  std::vector<float> peaked = spread;
  float largest = -INFINITY;
  for (float x : spread) largest = std::max(largest, LoadForTest(x));
  peaked[70001] = largest + 12.0f;  // Drawn at T = 1, rarely at T = 2.5.
  const float temperatures[] = {0.7f, 1.0f, 2.5f};
  int draws = 0;
  for (const std::vector<float>* row : {&spread, &peaked, &flat}) {
    for (uint64_t seed = 0; seed < 8; ++seed) {
      const float temperature = temperatures[seed % 3];
      // The cut is below the maximum, as the sampler's always is.
      float max_logit = -INFINITY;
      for (float x : *row) max_logit = std::max(max_logit, LoadForTest(x));
      const float cut = max_logit - (seed % 4 == 1 ? 0.3f : 6.0f);
      const uint32_t min_key = seed % 2 == 0 ? 0 : OrderedFloatKey(cut);
      const uint64_t index = seed * 7919;
      const int32_t want = PlainGumbelMax(*row, temperature, min_key, seed, index);
      for (SimdLevel level : SupportedSimdLevels()) {
        EXPECT_EQ(DrawAtLevel(*row, temperature, min_key, seed, index, level), want)
            << SimdLevelName(level) << " seed " << seed << " T " << temperature;
      }
      ++draws;
    }
  }
  EXPECT_EQ(draws, 24);
}

// An exact tie of scores goes to the lowest id. The draw starts from the
// argmax token's score, so the rule decides when a token before the argmax
// ties it: one of large noise is given the logit x < max with
// (x - max) + its noise == the argmax's noise exactly (the other tokens far
// below), and must win; the same tie after the argmax must lose.
TEST(GumbelDrawTest, ExactTiesGoToTheLowestIdAtEveryLevel) {
  constexpr int32_t kVocab = 20000;
  std::mt19937 rng(7);
  std::normal_distribution<float> low(-14.0f, 2.0f);
  int ties = 0, ties_before = 0;
  for (uint64_t seed = 0; seed < 40 && ties < 6; ++seed) {
    // The largest noise in each half: the tie goes to the larger one.
    int32_t first = 0, second = kVocab / 2;
    for (int32_t i = 0; i < kVocab; ++i) {
      int32_t& best = i < kVocab / 2 ? first : second;
      if (NoiseOfToken(seed, 0, i) > NoiseOfToken(seed, 0, best)) best = i;
    }
    const bool tie_before = NoiseOfToken(seed, 0, first) > NoiseOfToken(seed, 0, second);
    const int32_t argmax = tie_before ? second : first, tied = tie_before ? first : second;
    std::vector<float> row(kVocab);
    for (float& x : row) x = low(rng);
    row[argmax] = 0.0f;
    const float target = NoiseOfToken(seed, 0, argmax), noise = NoiseOfToken(seed, 0, tied);
    float x = target - noise;  // Then walk to where float's sum is exactly the target.
    for (int step = 0; step < 64 && x + noise != target; ++step) {
      x = std::nextafter(x, x + noise < target ? INFINITY : -INFINITY);
    }
    if (x + noise != target || !(x < 0.0f)) continue;
    row[tied] = x;
    const int32_t want = std::min(argmax, tied);
    ASSERT_EQ(PlainGumbelMax(row, 1.0f, 0, seed, 0), want) << "seed " << seed;
    for (SimdLevel level : SupportedSimdLevels()) {
      EXPECT_EQ(DrawAtLevel(row, 1.0f, 0, seed, 0, level), want)
          << SimdLevelName(level) << " seed " << seed << (tie_before ? " before" : " after");
    }
    ++ties;
    ties_before += tie_before ? 1 : 0;
  }
  EXPECT_EQ(ties, 6);
  EXPECT_GT(ties_before, 0);
  EXPECT_LT(ties_before, ties);
}

}  // namespace
}  // namespace pagoda::worker

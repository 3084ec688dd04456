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
int32_t Draw(const std::vector<float>& logits, float temperature, uint32_t min_key, uint64_t seed,
             uint64_t index, SimdLevel level) {
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

// A 128,256-token row (Llama 3's vocabulary) with NaN and -inf entries, at
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
  const float temperatures[] = {0.7f, 1.0f, 2.5f};
  int draws = 0;
  for (const std::vector<float>* row : {&spread, &flat}) {
    for (uint64_t seed = 0; seed < 12; ++seed) {
      const float temperature = temperatures[seed % 3];
      // The cut is below the maximum, as the sampler's always is.
      float max_logit = -INFINITY;
      for (float x : *row) max_logit = std::max(max_logit, LoadForTest(x));
      const float cut = max_logit - (seed % 4 == 1 ? 0.3f : 6.0f);
      const uint32_t min_key = seed % 2 == 0 ? 0 : OrderedFloatKey(cut);
      const uint64_t index = seed * 7919;
      const int32_t want = PlainGumbelMax(*row, temperature, min_key, seed, index);
      for (SimdLevel level : SupportedSimdLevels()) {
        EXPECT_EQ(Draw(*row, temperature, min_key, seed, index, level), want)
            << SimdLevelName(level) << " seed " << seed << " T " << temperature;
      }
      ++draws;
    }
  }
  EXPECT_EQ(draws, 24);
}

// An exact tie of scores goes to the lowest id, also when the pruning has
// already seen the later one: a token before the winner is given the logit
// that makes its score equal the winner's, and then wins; after it, loses.
TEST(GumbelDrawTest, ExactTiesGoToTheLowestIdAtEveryLevel) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(20000);
  for (float& x : logits) x = normal(rng);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  int ties = 0;
  for (uint64_t seed = 0; seed < 40 && ties < 4; ++seed) {
    const int32_t winner = PlainGumbelMax(logits, 1.0f, 0, seed, 0);
    const float best = std::fma(logits[winner] - max_logit, 1.0f, NoiseOfToken(seed, 0, winner));
    // A token far from the winner, before or after it, whose noise alone
    // reaches the best score (so its tying logit stays below the maximum).
    for (const bool before : {true, false}) {
      int32_t tied = -1;
      for (int32_t i = before ? 0 : static_cast<int32_t>(logits.size()) - 1;
           i >= 0 && i < static_cast<int32_t>(logits.size()); i += before ? 1 : -1) {
        if (std::abs(i - winner) > 4 && NoiseOfToken(seed, 0, i) > best + 0.5f) {
          tied = i;
          break;
        }
      }
      if (tied < 0 || (before && tied > winner) || (!before && tied < winner)) continue;
      std::vector<float> row = logits;
      // Solve (x - max) + noise == best in float, near the real solution.
      float x = max_logit + (best - NoiseOfToken(seed, 0, tied));
      for (int step = 0; step < 64 && (x - max_logit) + NoiseOfToken(seed, 0, tied) != best;
           ++step) {
        x = std::nextafter(
            x, (x - max_logit) + NoiseOfToken(seed, 0, tied) < best ? INFINITY : -INFINITY);
      }
      if ((x - max_logit) + NoiseOfToken(seed, 0, tied) != best || x >= max_logit) continue;
      row[tied] = x;
      const int32_t want = before ? tied : winner;
      ASSERT_EQ(PlainGumbelMax(row, 1.0f, 0, seed, 0), want);
      for (SimdLevel level : SupportedSimdLevels()) {
        EXPECT_EQ(Draw(row, 1.0f, 0, seed, 0, level), want)
            << SimdLevelName(level) << " seed " << seed << (before ? " tie before" : " tie after");
      }
      ++ties;
    }
  }
  EXPECT_GE(ties, 4);
}

}  // namespace
}  // namespace pagoda::worker

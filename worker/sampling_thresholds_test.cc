// Top-k's and top-p's cuts (worker/sampling_thresholds.h) against their
// definitions computed by sorting the whole row, over rows whose cut's
// bucket holds few tokens, many, or all of them, with ties, NaN and -inf.
// Built into worker_sampler_test.

#include "worker/sampling_thresholds.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/sampling_limits.h"
#include "gtest/gtest.h"
#include "worker/gumbel_draw.h"

namespace pagoda::worker {
namespace {

uint32_t KeyForTest(float x) { return OrderedFloatKey(std::isnan(x) ? -INFINITY : x); }

uint32_t SortedTopK(const std::vector<float>& logits, int k) {
  std::vector<uint32_t> keys;
  for (float x : logits) keys.push_back(KeyForTest(x));
  std::sort(keys.begin(), keys.end(), std::greater<>());
  return keys[k - 1];
}

uint32_t SortedTopP(const std::vector<float>& logits, uint32_t min_key, float max_logit,
                    float inv_t, float top_p) {
  std::vector<std::pair<uint32_t, uint64_t>> kept;
  uint64_t total = 0;
  for (float raw : logits) {
    const float x = std::isnan(raw) ? -INFINITY : raw;
    const uint32_t key = KeyForTest(x);
    const uint64_t mass = static_cast<uint64_t>(std::exp((x - max_logit) * inv_t) * kTopPMassScale);
    if (key < min_key || mass == 0) continue;
    kept.emplace_back(key, mass);
    total += mass;
  }
  std::sort(kept.begin(), kept.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t target = static_cast<uint64_t>(std::ceil(static_cast<double>(top_p) * total));
  target = std::clamp<uint64_t>(target, 1, total);
  uint64_t cumulative = 0;
  for (const auto& [key, mass] : kept) {
    cumulative += mass;
    if (cumulative >= target) return key;
  }
  return min_key;
}

// Rows of `vocab` logits: N(0, 3) (the cut's bucket holds a few tokens);
// all within [1, 1.25) (one bucket holds the row); quantized to eighths
// (ties everywhere); N(0, 3) with NaN and -inf sprinkled in.
std::vector<std::pair<std::string, std::vector<float>>> ThresholdRows(int vocab) {
  std::mt19937 rng(vocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> narrow(1.0f, 1.25f);
  std::vector<float> spread(vocab), one_bucket(vocab), ties(vocab), holes(vocab);
  for (int i = 0; i < vocab; ++i) {
    spread[i] = normal(rng);
    one_bucket[i] = narrow(rng);
    ties[i] = std::round(normal(rng) * 8.0f) / 8.0f;
    holes[i] = i % 7 == 2 ? NAN : i % 5 == 1 ? -INFINITY : normal(rng);
  }
  return {{"spread", spread}, {"one bucket", one_bucket}, {"ties", ties}, {"holes", holes}};
}

TEST(SamplingThresholdsTest, TopKIsTheKthLargestKeyOfTheSortedRow) {
  for (int vocab : {1, 7, 300, 5000}) {
    for (const auto& [name, logits] : ThresholdRows(vocab)) {
      for (int k : {1, 2, 50, vocab / 2, vocab - 1, vocab}) {
        if (k < 1 || k > vocab) continue;
        EXPECT_EQ(TopKThreshold(logits, k), SortedTopK(logits, k))
            << name << " vocab " << vocab << " k " << k;
      }
    }
  }
}

TEST(SamplingThresholdsTest, TopPIsTheSortedRowsCutAtEveryPAndTemperature) {
  for (int vocab : {1, 7, 300, 5000}) {
    for (const auto& [name, logits] : ThresholdRows(vocab)) {
      float max_logit = -INFINITY;
      for (float x : logits) max_logit = std::max(max_logit, std::isnan(x) ? -INFINITY : x);
      for (float temperature : {0.3f, 1.0f, 4.0f}) {
        for (float top_p : {0.01f, 0.5f, 0.9f, 0.999f}) {
          for (uint32_t min_key : {0u, KeyForTest(max_logit - 2.0f)}) {
            EXPECT_EQ(TopPThreshold(logits, min_key, max_logit, 1.0f / temperature, top_p),
                      SortedTopP(logits, min_key, max_logit, 1.0f / temperature, top_p))
                << name << " vocab " << vocab << " T " << temperature << " p " << top_p;
          }
        }
      }
    }
  }
}

// The masses TopPThreshold does not compute are 0: the 2^20 floats just
// below kTopPZeroMassBelow (expf grows with its argument, so the rest are
// smaller). Half a unit above it a mass is 1: the skip is close to tight.
TEST(SamplingThresholdsTest, MassesBelowTheSkipAreZero) {
  float d = kTopPZeroMassBelow;
  for (int i = 0; i < (1 << 20); ++i) {
    d = std::nextafter(d, -INFINITY);
    ASSERT_EQ(static_cast<uint64_t>(std::exp(d) * kTopPMassScale), 0u) << d;
  }
  EXPECT_EQ(static_cast<uint64_t>(std::exp(kTopPZeroMassBelow) * kTopPMassScale), 0u);
  EXPECT_GT(static_cast<uint64_t>(std::exp(kTopPZeroMassBelow + 0.5f) * kTopPMassScale), 0u);
}

}  // namespace
}  // namespace pagoda::worker

// Host rotary tables: plain frequencies, HF llama3 band scaling, linear
// position scaling. Runs without a GPU.

#include "kernels/ops/rope_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace pagoda::kernels {
namespace {

TEST(RopeCacheTest, PlainInverseFrequencies) {
  const std::vector<double> inv = ComputeRopeInvFreq(128, 10000.0, {});
  ASSERT_EQ(inv.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    const double want = std::exp(-std::log(10000.0) * 2 * i / 128);
    EXPECT_NEAR(inv[i], want, 1e-14 * want) << i;
  }
}

TEST(RopeCacheTest, Llama3ScalingKeepsHighStretchesLowAndBlendsBetween) {
  RopeFrequencyScaling s;
  s.type = RopeFrequencyScaling::Type::kLlama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 8192;
  const std::vector<double> plain = ComputeRopeInvFreq(128, 500000.0, {});
  const std::vector<double> scaled = ComputeRopeInvFreq(128, 500000.0, s);
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++high;
    } else if (wavelen > 8192.0 / 1) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8);
      ++low;
    } else {
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      EXPECT_DOUBLE_EQ(scaled[i], (1 - smooth) * plain[i] / 8 + smooth * plain[i]);
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8);
      ++medium;
    }
  }
  // Llama 3.1's setting has all three bands.
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeCacheTest, CacheHoldsCosThenSinAndLinearScalesPositions) {
  RopeFrequencyScaling linear;
  linear.type = RopeFrequencyScaling::Type::kLinear;
  linear.factor = 4;
  const std::vector<double> plain_inv = ComputeRopeInvFreq(8, 10000.0, {});
  const std::vector<double> inv = ComputeRopeInvFreq(8, 10000.0, linear);
  ASSERT_EQ(inv.size(), plain_inv.size());
  // Linear folds the position scale into the frequencies: p / 4 at inv.
  for (size_t i = 0; i < inv.size(); ++i) EXPECT_DOUBLE_EQ(inv[i], plain_inv[i] / 4);
  const std::vector<float> cache = BuildRopeCosSinCache(9, inv);
  const std::vector<float> plain = BuildRopeCosSinCache(9, plain_inv);
  ASSERT_EQ(cache.size(), 9u * 8);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(cache[8 * 5 + i], std::cos(5 / 4.0 * plain_inv[i]));
    EXPECT_FLOAT_EQ(cache[8 * 5 + 4 + i], std::sin(5 / 4.0 * plain_inv[i]));
    EXPECT_FLOAT_EQ(cache[8 * 8 + i], plain[8 * 2 + i]);  // position 8 / 4 == position 2
    EXPECT_EQ(cache[i], 1.0f);                            // position 0
    EXPECT_EQ(cache[4 + i], 0.0f);
  }
}

}  // namespace
}  // namespace pagoda::kernels

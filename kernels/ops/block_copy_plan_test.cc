// Host-side pieces that need no GPU: the swap coalescing plan and the Philox
// generator the sampler uses.

#include "kernels/ops/block_copy_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops/philox.h"

namespace pagoda::kernels {
namespace {

TEST(BlockCopyPlanTest, MergesRunsWhereSourceAndDestinationBothFollowOn) {
  const std::vector<BlockPair> pairs = {{7, 3}, {5, 1}, {6, 2}, {9, 4}, {10, 20}, {11, 21}};
  const std::vector<BlockCopyRun> want = {{5, 1, 3}, {9, 4, 1}, {10, 20, 2}};
  EXPECT_EQ(PlanBlockCopyRuns(pairs), want);
}

TEST(BlockCopyPlanTest, EmptyAndDuplicatesAndBackwardDestinations) {
  EXPECT_TRUE(PlanBlockCopyRuns({}).empty());
  const std::vector<BlockPair> pairs = {{1, 8}, {1, 8}, {2, 7}, {3, 9}};
  // 1->8 then 2->7 goes backwards in dst: not a run; 2->7, 3->9 skips: not a run.
  const std::vector<BlockCopyRun> want = {{1, 8, 1}, {2, 7, 1}, {3, 9, 1}};
  EXPECT_EQ(PlanBlockCopyRuns(pairs), want);
}

TEST(BlockCopyPlanTest, EveryPairIsCoveredExactlyOnce) {
  std::vector<BlockPair> pairs;
  // Destination = 100 + src + 5 * (src / 10): ten runs of ten, shuffled.
  for (int i = 0; i < 100; ++i) {
    const int64_t src = (i * 37) % 100;
    pairs.push_back({src, 100 + src + 5 * (src / 10)});
  }
  const std::vector<BlockCopyRun> runs = PlanBlockCopyRuns(pairs);
  int covered = 0;
  for (const BlockCopyRun& run : runs) {
    for (int64_t j = 0; j < run.count; ++j) {
      const int64_t src = run.src + j;
      EXPECT_EQ(run.dst + j, 100 + src + 5 * (src / 10));
      ++covered;
    }
  }
  EXPECT_EQ(covered, 100);
  EXPECT_EQ(runs.size(), 10u);
}

// Known-answer vectors of Philox4x32-10 published with the Random123 library.
TEST(PhiloxTest, KnownAnswers) {
  const Philox4x32Block zero = Philox4x32({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const Philox4x32Block ones =
      Philox4x32({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
}

TEST(PhiloxTest, StreamsDifferAndUniformsStayInsideTheOpenInterval) {
  const Philox4x32Block a = PhiloxDraws(1, 0, 0), b = PhiloxDraws(1, 1, 0),
                        c = PhiloxDraws(2, 0, 0), d = PhiloxDraws(1, 0, 1);
  EXPECT_NE(a.v[0], b.v[0]);
  EXPECT_NE(a.v[0], c.v[0]);
  EXPECT_NE(a.v[0], d.v[0]);
  EXPECT_GT(UniformOpen01(0), 0.0f);
  EXPECT_LT(UniformOpen01(0xffffffffu), 1.0f);
  double sum = 0;
  for (uint64_t g = 0; g < 10000; ++g) {
    for (uint32_t bits : PhiloxDraws(99, 5, g).v) sum += UniformOpen01(bits);
  }
  EXPECT_NEAR(sum / 40000, 0.5, 0.01);  // 0.5 +- ~7 sigma
}

}  // namespace
}  // namespace pagoda::kernels

// PickGemmCandidate (gemm.h), the host rule that chooses among timed
// cuBLASLt candidates: the heuristic's first pick, the fastest, and a
// candidate without a split-K reduction where it times equal. No device
// needed: linked into kernels_ops_rope_cache_test, a host-only binary.

#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops/gemm.h"

namespace pagoda::kernels {
namespace {

int Pick(const std::vector<GemmCandidateTiming>& c, bool fastest, bool prefer_no_split_k) {
  return PickGemmCandidate(c.data(), static_cast<int>(c.size()), fastest, prefer_no_split_k);
}

TEST(PickGemmCandidateTest, KeepsTheHeuristicsPickWithNeitherRule) {
  EXPECT_EQ(Pick({{10, true}, {5, false}}, false, false), 0);
}

TEST(PickGemmCandidateTest, FastestNeedsToBeatTheFirstByTheMinimumGain) {
  EXPECT_EQ(Pick({{10, false}, {9.8f, false}, {9.9f, false}}, true, false), 0);  // 2 %: kept
  EXPECT_EQ(Pick({{10, false}, {9.9f, false}, {9.0f, false}}, true, false), 2);
  EXPECT_EQ(Pick({{10, false}, {-1, false}, {9.5f, false}}, true, false), 2);  // failed skipped
}

TEST(PickGemmCandidateTest, PrefersNoSplitKWithinTheTolerance) {
  // The split-K first pick loses to a no-split one that is 2 % slower...
  EXPECT_EQ(Pick({{10, true}, {10.2f, false}, {9.0f, true}}, false, true), 1);
  // ...and to the fastest of several no-split ones, but not to one 5 % slower.
  EXPECT_EQ(Pick({{10, true}, {10.2f, false}, {10.1f, false}}, false, true), 2);
  EXPECT_EQ(Pick({{10, true}, {10.5f, false}}, false, true), 0);
  // A first pick that does not split stays, even when another is faster.
  EXPECT_EQ(Pick({{10, false}, {8, false}}, false, true), 0);
  // Failed candidates never win.
  EXPECT_EQ(Pick({{10, true}, {-1, false}}, false, true), 0);
}

TEST(PickGemmCandidateTest, BothRulesCompareTheNoSplitOneWithTheFastest) {
  // Fastest is 2 (split, 8 ms); the no-split 3 at 8.2 ms is within 3 % of it.
  EXPECT_EQ(Pick({{10, true}, {9.9f, false}, {8, true}, {8.2f, false}}, true, true), 3);
  // The no-split 1 is close to the first pick but not to the fastest.
  EXPECT_EQ(Pick({{10, true}, {10.1f, false}, {8, true}}, true, true), 2);
}

TEST(PickGemmCandidateTest, AnUntimedFirstPickKeepsIt) {
  EXPECT_EQ(Pick({{-1, true}, {1, false}}, true, true), 0);
  EXPECT_EQ(Pick({}, true, true), 0);
}

}  // namespace
}  // namespace pagoda::kernels

// Prompt lookup against vLLM's documented cases and against a plain
// reference that tries every n and every start literally.

#include "scheduler/spec/ngram_proposer.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

std::vector<int32_t> Propose(const std::vector<int32_t>& tokens, int min_n, int max_n, int k,
                             int max_model_len = 1000) {
  return ProposeNgramDrafts(tokens, NgramLookup{.min_n = min_n,
                                                .max_n = max_n,
                                                .num_speculative_tokens = k,
                                                .max_model_len = max_model_len});
}

using Tokens = std::vector<int32_t>;

TEST(NgramProposerTest, VllmsDocumentedExample) {
  // [4, 2, 3] has no earlier match; [2, 3] does, and three tokens follow it.
  EXPECT_EQ(Propose({1, 2, 3, 4, 2, 3}, 2, 3, 4), (Tokens{4, 2, 3}));
}

TEST(NgramProposerTest, TheLongestMatchWinsOverAnEarlierShorterOne) {
  // [2, 3] first occurs at 0 (followed by 20); [1, 2, 3] at 3 (followed by 10).
  EXPECT_EQ(Propose({2, 3, 20, 1, 2, 3, 10, 1, 2, 3}, 1, 3, 2), (Tokens{10, 1}));
  // Capped at max_n = 2, the earliest [2, 3] wins.
  EXPECT_EQ(Propose({2, 3, 20, 1, 2, 3, 10, 1, 2, 3}, 1, 2, 2), (Tokens{20, 1}));
}

TEST(NgramProposerTest, TheEarliestOfEqualMatchesWins) {
  EXPECT_EQ(Propose({1, 2, 5, 1, 2, 6, 1, 2}, 2, 2, 3), (Tokens{5, 1, 2}));
}

TEST(NgramProposerTest, BelowMinNothingIsProposed) {
  EXPECT_TRUE(Propose({1, 2, 3, 4, 5, 3}, 2, 3, 3).empty());
  EXPECT_EQ(Propose({1, 2, 3, 4, 5, 3}, 1, 3, 3), (Tokens{4, 5, 3}));
  EXPECT_TRUE(Propose({7}, 2, 3, 3).empty());  // Shorter than min_n.
  EXPECT_TRUE(Propose({}, 1, 3, 3).empty());
  EXPECT_TRUE(Propose({7}, 1, 3, 3).empty());  // Nothing before the suffix.
}

TEST(NgramProposerTest, MatchesMayOverlapTheSuffix) {
  // [5, 5, 5] ends at index 2; one token follows it.
  EXPECT_EQ(Propose({5, 5, 5, 5}, 1, 3, 4), (Tokens{5}));
}

TEST(NgramProposerTest, NoDraftPastTheModelsLength) {
  EXPECT_EQ(Propose({1, 2, 3, 4, 1, 2}, 1, 2, 4, /*max_model_len=*/8), (Tokens{3, 4}));
  EXPECT_TRUE(Propose({1, 2, 3, 4, 1, 2}, 1, 2, 4, /*max_model_len=*/6).empty());
  EXPECT_TRUE(Propose({1, 2, 3, 4, 1, 2}, 1, 2, 0).empty());
}

// The definition, literally: for n from max_n down to min_n, the first start
// s whose n tokens equal the last n and end before the last token.
Tokens Reference(const Tokens& tokens, int min_n, int max_n, int k, int max_model_len) {
  const int total = static_cast<int>(tokens.size());
  k = std::min(k, max_model_len - total);
  if (total < min_n || k <= 0) return {};
  for (int n = max_n; n >= min_n; --n) {
    for (int s = 0; s + n <= total - 1; ++s) {
      bool equal = true;
      for (int i = 0; i < n && equal; ++i) equal = tokens[s + i] == tokens[total - n + i];
      if (!equal) continue;
      const int first = s + n;
      return Tokens(tokens.begin() + first, tokens.begin() + std::min(total, first + k));
    }
  }
  return {};
}

TEST(NgramProposerTest, AgreesWithTheLiteralDefinition) {
  std::mt19937 rng(17);
  int proposed = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    // Mostly small vocabularies (many matches); a large one now and then,
    // and lengths over several of the scan's 16-token blocks.
    const int vocab = trial % 8 == 0 ? 40 : 2 + static_cast<int>(rng() % 4);
    const int length = static_cast<int>(rng() % 90);
    Tokens tokens(length);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
    const int min_n = 1 + static_cast<int>(rng() % 3);
    const int max_n = min_n + static_cast<int>(rng() % 4);
    const int k = static_cast<int>(rng() % 6);
    const int max_model_len = length + static_cast<int>(rng() % 8);
    const Tokens want = Reference(tokens, min_n, max_n, k, max_model_len);
    ASSERT_EQ(Propose(tokens, min_n, max_n, k, max_model_len), want) << "trial " << trial;
    proposed += want.empty() ? 0 : 1;
  }
  EXPECT_GT(proposed, 1000);  // The comparison covers proposals, not just refusals.
}

}  // namespace
}  // namespace pagoda::scheduler

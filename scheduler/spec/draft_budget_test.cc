// DraftBudget: each rule that keeps speculative output plain decoding's.

#include "scheduler/spec/draft_budget.h"

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

DraftRequest Roomy() {
  return DraftRequest{.num_speculative_tokens = 4,
                      .running_sequences = 1,
                      .context_tokens = 100,
                      .output_tokens = 10,
                      .max_tokens = 1000,
                      .max_model_len = 4096};
}

TEST(DraftBudgetTest, KWhenNothingLimitsIt) { EXPECT_EQ(DraftBudget(Roomy()), 4); }

TEST(DraftBudgetTest, NoneForWhatThePlanCannotVerifyPerRow) {
  for (auto flag : {&DraftRequest::bad_words, &DraftRequest::beam_search}) {
    DraftRequest request = Roomy();
    request.*flag = true;
    EXPECT_EQ(DraftBudget(request), 0);
  }
}

TEST(DraftBudgetTest, NoneAboveDisableByBatchSize) {
  DraftRequest request = Roomy();
  request.disable_by_batch_size = 8;
  request.running_sequences = 8;
  EXPECT_EQ(DraftBudget(request), 4);
  request.running_sequences = 9;
  EXPECT_EQ(DraftBudget(request), 0);
}

TEST(DraftBudgetTest, NoRowPastMaxTokens) {
  DraftRequest request = Roomy();
  request.max_tokens = 13;  // 10 out: rows sample outputs 11..13 with 2 drafts.
  EXPECT_EQ(DraftBudget(request), 2);
  request.max_tokens = 11;
  EXPECT_EQ(DraftBudget(request), 0);
}

TEST(DraftBudgetTest, NoPositionPastTheModelsLength) {
  DraftRequest request = Roomy();
  request.max_model_len = 103;  // Context 100: positions 99..101, length 103 after.
  EXPECT_EQ(DraftBudget(request), 2);
  request.max_model_len = 100;
  EXPECT_EQ(DraftBudget(request), 0);
}

// A draft model of 16 positions: k proposals after `length` tokens run its
// passes at positions up to length + k - 1, so length 12 is the last that
// drafts 4 and 13 the first that drafts none (not 3: all or nothing).
TEST(DraftBudgetTest, NoneWhoseDraftPassesPassTheDraftModelsPositions) {
  DraftRequest request = Roomy();
  request.draft_max_len = 16;
  request.max_model_len = 128;
  request.context_tokens = 12;
  EXPECT_EQ(DraftBudget(request), 4);
  request.context_tokens = 13;
  EXPECT_EQ(DraftBudget(request), 0);
  request.context_tokens = 100;
  EXPECT_EQ(DraftBudget(request), 0);
  request.draft_max_len.reset();  // ngram and EAGLE heads: the target's positions.
  EXPECT_EQ(DraftBudget(request), 4);
}

// The edge follows the row's own budget: with k - 1 left by max_tokens,
// length 13 still drafts its 3, 14 none.
TEST(DraftBudgetTest, TheDraftModelsEdgeFollowsABudgetOfKMinusOne) {
  DraftRequest request = Roomy();
  request.draft_max_len = 16;
  request.max_tokens = 14;  // 10 out: 3 drafts and the token after them.
  request.context_tokens = 13;
  EXPECT_EQ(DraftBudget(request), 3);
  request.context_tokens = 14;
  EXPECT_EQ(DraftBudget(request), 0);
  request.num_speculative_tokens = 3;  // k itself 3: the same edge.
  request.max_tokens = 1000;
  request.context_tokens = 13;
  EXPECT_EQ(DraftBudget(request), 3);
  request.context_tokens = 14;
  EXPECT_EQ(DraftBudget(request), 0);
}

TEST(DraftBudgetTest, NoRowCrossesMinTokens) {
  DraftRequest request = Roomy();
  request.min_tokens = 13;  // Outputs 11, 12, 13 (indices 10..12) still ban EOS.
  EXPECT_EQ(DraftBudget(request), 2);
  request.min_tokens = 11;
  EXPECT_EQ(DraftBudget(request), 0);
  request.min_tokens = 10;  // Reached: EOS allowed at every row.
  EXPECT_EQ(DraftBudget(request), 4);
}

}  // namespace
}  // namespace pagoda::scheduler

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

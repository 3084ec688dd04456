// The state changes of overlapped scheduling on a real Scheduler: the step
// planned while another is in flight decodes the placeholder (marked for
// the worker, left out of the penalty counts), a sequence whose token in
// flight is its last sits the step out, a late stop's token is dropped, an
// abandoned step leaves the state it found, MayPreempt sees a full cache, and
// a multi-token bad word's ban follows the plan in a mask.
#include "scheduler/engine/step_pipeline.h"

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine/step_plan.h"

namespace pagoda::scheduler {
namespace {

constexpr int kBlockSize = 4;

class StepPipelineTest : public ::testing::Test {
 protected:
  StepPipelineTest() : scheduler_(Config()) {}

  static SchedulerConfig Config() {
    SchedulerConfig config;
    config.block_size = kBlockSize;
    config.num_gpu_blocks = 8;
    config.max_num_batched_tokens = 64;
    config.max_model_len = 64;
    config.watermark = 0;
    return config;
  }

  SequenceGroup* Add(int id, int prompt_len, int max_tokens,
                     std::vector<std::vector<int32_t>> bad_words = {}) {
    std::vector<int32_t> prompt(prompt_len);
    std::iota(prompt.begin(), prompt.end(), 10 * id);
    StoppingOptions stopping;
    stopping.max_tokens = max_tokens;
    SamplingOptions sampling;
    sampling.frequency_penalty = 0.5f;
    sampling.bad_words_token_ids = std::move(bad_words);
    auto group = std::make_unique<SequenceGroup>(absl::StrCat("r", id), std::move(prompt), id,
                                                 sampling, stopping, absl::Now());
    SequenceGroup* raw = group.get();
    scheduler_.AddSequenceGroup(std::move(group));
    return raw;
  }

  Scheduler scheduler_;
};

TEST_F(StepPipelineTest, NextStepDecodesThePlaceholderAndCountsOnlyKnownTokens) {
  Sequence& seq = *Add(1, 6, 8)->seqs()[0];
  SchedulerOutput prompt_step = scheduler_.Schedule();
  ASSERT_EQ(prompt_step.scheduled.size(), 1u);
  AdvancePastStep(prompt_step, 64);
  EXPECT_TRUE(seq.has_pending_token());
  EXPECT_EQ(seq.length(), 7);
  EXPECT_EQ(seq.num_computed_tokens(), 6);
  EXPECT_TRUE(seq.output_token_counts().empty());

  SchedulerOutput decode_step = scheduler_.Schedule();
  ASSERT_EQ(decode_step.scheduled.size(), 1u);
  EXPECT_EQ(decode_step.scheduled[0].start_position, 6);
  EXPECT_EQ(decode_step.scheduled[0].num_tokens, 1);
  pagoda::worker::v1::StepPlan plan = BuildStepPlan(1, decode_step, scheduler_.block_manager());
  MarkPlaceholders(decode_step, &plan);
  EXPECT_TRUE(plan.sequences(0).input_from_last_sample());
  EXPECT_EQ(plan.sequences(0).sample_index(), 1);  // The token after the one in flight.
  EXPECT_EQ(plan.sequences(0).sampling().output_token_ids_size(), 0);

  // The prompt step answers: its token replaces the placeholder.
  LiveStep live = TakeLiveEntries(prompt_step, {GeneratedToken{42, -1.0f, {}}});
  EXPECT_FALSE(seq.has_pending_token());
  EXPECT_EQ(seq.length(), 6);
  ASSERT_EQ(live.sampled.size(), 1u);
  EXPECT_EQ(live.sampled[0].token_id, 42);
}

TEST_F(StepPipelineTest, SequenceWhoseTokenInFlightIsItsLastSitsOutTheNextStep) {
  SequenceGroup& last = *Add(1, 5, /*max_tokens=*/1);
  SequenceGroup& other = *Add(2, 5, 8);
  SchedulerOutput prompt_step = scheduler_.Schedule();
  ASSERT_EQ(prompt_step.scheduled.size(), 2u);
  AdvancePastStep(prompt_step, 64);
  EXPECT_TRUE(last.waits_for_tokens());
  EXPECT_FALSE(last.seqs()[0]->has_pending_token());
  EXPECT_FALSE(other.waits_for_tokens());
  SchedulerOutput next = scheduler_.Schedule();
  ASSERT_EQ(next.scheduled.size(), 1u);
  EXPECT_EQ(next.scheduled[0].group, &other);
  TakeLiveEntries(prompt_step, {GeneratedToken{3, 0, {}}, GeneratedToken{4, 0, {}}});
  EXPECT_FALSE(last.waits_for_tokens());
}

TEST_F(StepPipelineTest, LateStopDropsTheTokenInFlightAndAbandonRestoresTheState) {
  SequenceGroup& group = *Add(1, 5, 8);
  Sequence& seq = *group.seqs()[0];
  SchedulerOutput first = scheduler_.Schedule();
  AdvancePastStep(first, 64);
  SchedulerOutput second = scheduler_.Schedule();
  TakeLiveEntries(first, {GeneratedToken{3, 0, {}}});
  seq.AppendToken(GeneratedToken{3, 0, {}});
  AdvancePastStep(second, 64);
  EXPECT_TRUE(seq.has_pending_token());
  EXPECT_EQ(seq.num_computed_tokens(), 6);
  // Abandoned (a failure): back to one known token, not yet computed.
  AbandonStep(second);
  EXPECT_FALSE(seq.has_pending_token());
  EXPECT_EQ(seq.length(), 6);
  EXPECT_EQ(seq.num_computed_tokens(), 5);
  // Finished meanwhile: the step's token for it is dropped.
  seq.set_status(SequenceStatus::kFinishedStopped);
  LiveStep live = TakeLiveEntries(second, {GeneratedToken{9, 0, {}}});
  EXPECT_TRUE(live.output.scheduled.empty());
  EXPECT_TRUE(live.sampled.empty());
}

TEST_F(StepPipelineTest, MultiTokenBadWordsBanFollowsThePlanOnceTheTokenIsIn) {
  constexpr int kVocabSize = 40;
  // Bans 7 after 30, and 5 always.
  SequenceGroup& group = *Add(1, 5, 8, {{30, 7}, {5}});
  Sequence& seq = *group.seqs()[0];
  SchedulerOutput prompt_step = scheduler_.Schedule();
  AdvancePastStep(prompt_step, 64, kVocabSize);
  EXPECT_FALSE(group.waits_for_tokens());
  EXPECT_TRUE(seq.has_pending_token());
  SchedulerOutput decode_step = scheduler_.Schedule();
  ASSERT_EQ(decode_step.scheduled.size(), 1u);
  pagoda::worker::v1::StepPlan plan = BuildStepPlan(1, decode_step, scheduler_.block_manager());
  MarkPlaceholders(decode_step, &plan);
  const pagoda::worker::v1::SequenceStep& row = plan.sequences(0);
  EXPECT_TRUE(row.input_from_last_sample());
  EXPECT_TRUE(row.token_mask_follows());
  // The single-token word's ban stays in the plan; the pair's waits for
  // the token in flight.
  EXPECT_EQ(std::vector<int32_t>(row.sampling().banned_token_ids().begin(),
                                 row.sampling().banned_token_ids().end()),
            std::vector<int32_t>{5});

  // The token in flight is 30: the mask bans 7 and allows every other token
  // of the vocabulary, no bit past it.
  TakeLiveEntries(prompt_step, {GeneratedToken{30, 0, {}}});
  seq.AppendToken(GeneratedToken{30, 0, {}});
  const pagoda::worker::v1::StepMasks masks = BuildStepMasks(plan, decode_step, {}, kVocabSize);
  ASSERT_EQ(masks.rows_size(), 1);
  const std::string& mask = masks.rows(0).token_mask();
  ASSERT_EQ(mask.size(), 8u);
  uint32_t words[2];
  std::memcpy(words, mask.data(), mask.size());
  EXPECT_EQ(words[0], ~(uint32_t{1} << 7));
  EXPECT_EQ(words[1], (uint32_t{1} << (kVocabSize - 32)) - 1);

  // A vocabulary the engine does not know (or of no more tokens than the
  // multi-token words) leaves no mask to carry the ban: the group sits the
  // next step out, as every such group did before.
  AdvancePastStep(decode_step, 64, /*vocab_size=*/0);
  EXPECT_TRUE(group.waits_for_tokens());
  EXPECT_FALSE(seq.has_pending_token());
}

TEST_F(StepPipelineTest, MayPreemptWhenTheDecodesNeedMoreBlocksThanAreFree) {
  // Two prompts of 8 tokens hold 4 of the 8 blocks; the 9th tokens need 2 more.
  Add(1, 8, 16);
  Add(2, 8, 16);
  SchedulerOutput prompts = scheduler_.Schedule();
  AdvancePastStep(prompts, 64);
  EXPECT_FALSE(scheduler_.MayPreempt());
  Add(3, 15, 16);  // Takes the last 4 blocks.
  TakeLiveEntries(prompts, {GeneratedToken{3, 0, {}}, GeneratedToken{4, 0, {}}});
  for (const ScheduledSequence& entry : prompts.scheduled) {
    entry.seq->AppendToken(GeneratedToken{3, 0, {}});
  }
  SchedulerOutput next = scheduler_.Schedule();
  AdvancePastStep(next, 64);
  EXPECT_EQ(scheduler_.block_manager().num_free_gpu_blocks(), 0);
  EXPECT_TRUE(scheduler_.MayPreempt());
}

}  // namespace
}  // namespace pagoda::scheduler

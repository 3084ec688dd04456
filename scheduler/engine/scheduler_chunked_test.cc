// Chunked prefill and the priority policy, step by step.
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {
namespace {

const absl::Time kEpoch = absl::FromUnixSeconds(1'000'000);

SchedulerConfig ChunkedConfig(int budget, int gpu_blocks, int cpu_blocks = 0) {
  SchedulerConfig config;
  config.block_size = 4;
  config.num_gpu_blocks = gpu_blocks;
  config.num_cpu_blocks = cpu_blocks;
  config.max_model_len = 128;
  config.max_num_batched_tokens = budget;
  config.enable_chunked_prefill = true;
  config.watermark = 0.0;
  return config;
}

class ChunkedSchedulerTest : public ::testing::Test {
 protected:
  // A request whose prompt counts up from `first_token`.
  SequenceGroup* Add(Scheduler& scheduler, int id, int prompt_len, int max_tokens = 8,
                     int priority = 0, int first_token = -1) {
    std::vector<int32_t> prompt(prompt_len);
    std::iota(prompt.begin(), prompt.end(), first_token >= 0 ? first_token : 100 * id);
    StoppingOptions stopping;
    stopping.max_tokens = max_tokens;
    stopping.ignore_eos = true;
    auto group =
        std::make_unique<SequenceGroup>("r" + std::to_string(id), std::move(prompt), next_seq_id_++,
                                        SamplingOptions{}, stopping, kEpoch + absl::Seconds(id));
    group->set_priority(priority);
    SequenceGroup* raw = group.get();
    scheduler.AddSequenceGroup(std::move(group));
    return raw;
  }

  // Samples token 7 for every sampling entry, commits blocks, frees.
  void Finish(Scheduler& scheduler, const SchedulerOutput& output) {
    std::vector<GeneratedToken> sampled;
    for (const ScheduledSequence& entry : output.scheduled) {
      if (entry.do_sample) sampled.push_back({7, -0.5f, {}});
    }
    OutputProcessor processor({/*eos=*/2}, scheduler.config().max_model_len, &scheduler);
    processor.Process(output, sampled);
    scheduler.CommitComputedBlocks(output);
    // Kept, so that the tests may read the groups they added to the end.
    for (auto& group : scheduler.FreeFinished()) done_.push_back(std::move(group));
  }

  int64_t next_seq_id_ = 1;
  std::vector<std::unique_ptr<SequenceGroup>> done_;
};

TEST_F(ChunkedSchedulerTest, DecodesFirstThenChunksFillTheRestOfTheBudget) {
  Scheduler scheduler(ChunkedConfig(/*budget=*/10, /*gpu_blocks=*/64));
  Add(scheduler, 1, 3);
  Add(scheduler, 2, 3);
  Finish(scheduler, scheduler.Schedule());  // Both prompts in one step.
  SequenceGroup* long_prompt = Add(scheduler, 3, 30);
  SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 3u);
  EXPECT_EQ(step.scheduled[0].num_tokens, 1);  // r1 decodes.
  EXPECT_EQ(step.scheduled[1].num_tokens, 1);  // r2 decodes.
  EXPECT_EQ(step.scheduled[2].group, long_prompt);
  EXPECT_EQ(step.scheduled[2].start_position, 0);
  EXPECT_EQ(step.scheduled[2].num_tokens, 8);
  EXPECT_FALSE(step.scheduled[2].do_sample);
  EXPECT_EQ(step.num_batched_tokens, 10);
  EXPECT_EQ(step.num_prefill_tokens, 8);
  // The partial prefill counts as running, as in vLLM.
  EXPECT_EQ(scheduler.num_running(), 3);
  EXPECT_EQ(scheduler.num_waiting(), 0);
  Finish(scheduler, step);
  SchedulerOutput next = scheduler.Schedule();
  ASSERT_EQ(next.scheduled.size(), 3u);
  EXPECT_EQ(next.scheduled[2].start_position, 8);
  EXPECT_EQ(next.scheduled[2].num_tokens, 8);
}

// A decode with lookahead slots (speculative decoding's drafts) takes them
// from the token budget and has blocks for them; zero (the default) changes
// nothing.
TEST_F(ChunkedSchedulerTest, LookaheadSlotsAreCountedInTheBudgetAndReservedInTheTable) {
  for (int lookahead : {0, 4}) {
    Scheduler scheduler(ChunkedConfig(/*budget=*/10, /*gpu_blocks=*/64));
    SequenceGroup* decoding = Add(scheduler, 1, 4);
    Finish(scheduler, scheduler.Schedule());  // Length 5.
    Sequence& seq = *decoding->seqs()[0];
    EXPECT_EQ(seq.num_lookahead_slots(), 0);
    seq.set_num_lookahead_slots(lookahead);
    SequenceGroup* prompt = Add(scheduler, 2, 30);
    SchedulerOutput step = scheduler.Schedule();
    ASSERT_EQ(step.scheduled.size(), 2u) << lookahead;
    EXPECT_EQ(step.scheduled[0].seq, &seq);
    EXPECT_EQ(step.scheduled[0].num_tokens, 1);
    EXPECT_EQ(step.scheduled[0].num_lookahead_slots, lookahead);
    EXPECT_EQ(scheduler.block_manager().GetBlockTable(seq.seq_id()).size(),
              static_cast<size_t>((5 + lookahead + 3) / 4));
    EXPECT_EQ(step.scheduled[1].group, prompt);
    EXPECT_EQ(step.scheduled[1].num_tokens, 10 - 1 - lookahead);
    EXPECT_EQ(step.scheduled[1].num_lookahead_slots, 0);
    EXPECT_EQ(step.num_batched_tokens, 10 - lookahead);
  }
}

TEST_F(ChunkedSchedulerTest, PromptLongerThanTheBudgetSamplesOnlyAtItsLastChunk) {
  Scheduler scheduler(ChunkedConfig(/*budget=*/7, /*gpu_blocks=*/64));
  SequenceGroup* group = Add(scheduler, 1, 20);
  std::vector<int> chunks;
  while (group->seqs()[0]->num_output_tokens() == 0) {
    SchedulerOutput step = scheduler.Schedule();
    ASSERT_EQ(step.scheduled.size(), 1u);
    chunks.push_back(step.scheduled[0].num_tokens);
    EXPECT_EQ(step.scheduled[0].do_sample, chunks.size() == 3);
    Finish(scheduler, step);
  }
  EXPECT_EQ(chunks, std::vector<int>({7, 7, 6}));
}

TEST_F(ChunkedSchedulerTest, FinishedBlocksOfAHalfPrefilledPromptAreAlreadyShared) {
  SchedulerConfig config = ChunkedConfig(/*budget=*/8, /*gpu_blocks=*/64);
  config.max_num_partial_prefills = 2;
  config.max_long_partial_prefills = 2;
  config.long_prefill_token_threshold = 4;
  Scheduler scheduler(config);
  Add(scheduler, 1, 30, 8, 0, /*first_token=*/500);
  Finish(scheduler, scheduler.Schedule());  // [0, 4): block 0 is committed.
  Finish(scheduler, scheduler.Schedule());  // [4, 8): block 1 too.
  // The same first 8 tokens, while r1 is still part-way through its prompt.
  Add(scheduler, 2, 12, 8, 0, /*first_token=*/500);
  SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(step.scheduled[0].start_position, 8);  // r1's next chunk.
  EXPECT_EQ(step.scheduled[1].start_position, 8);  // r2 starts after the hits.
  EXPECT_EQ(step.scheduled[1].num_tokens, 4);
  EXPECT_TRUE(step.scheduled[1].do_sample);
  EXPECT_EQ(scheduler.block_manager().prefix_cache_hits(), 8);
}

TEST_F(ChunkedSchedulerTest, RecomputedPartialPrefillRestartsFromItsCachedBlocks) {
  // 8 blocks: r2's 24-token prompt (6 blocks) next to r1 (2, growing to 7):
  // r1's growth preempts r2 part-way through its prompt.
  SchedulerConfig config = ChunkedConfig(/*budget=*/8, /*gpu_blocks=*/8);
  config.preemption_mode = PreemptionMode::kRecompute;
  Scheduler scheduler(config);
  Add(scheduler, 1, 7, /*max_tokens=*/20);  // Decodes and grows to 7 blocks.
  Finish(scheduler, scheduler.Schedule());
  SequenceGroup* partial = Add(scheduler, 2, 24);
  int preempted = 0;
  for (int step = 0; step < 200 && scheduler.HasUnfinished(); ++step) {
    SchedulerOutput output = scheduler.Schedule();
    EXPECT_TRUE(output.ignored.empty());
    preempted += output.num_preempted;
    for (const ScheduledSequence& entry : output.scheduled) {
      EXPECT_EQ(entry.start_position, entry.seq->num_computed_tokens());
    }
    Finish(scheduler, output);
  }
  EXPECT_GT(preempted, 0);
  EXPECT_FALSE(scheduler.HasUnfinished());
  EXPECT_EQ(partial->seqs()[0]->num_output_tokens(), 8);
  EXPECT_EQ(scheduler.block_manager().num_free_gpu_blocks(), 8);
}

TEST_F(ChunkedSchedulerTest, SwappedPartialPrefillResumesWhereItStopped) {
  // 10 blocks: r1 (12 tokens, growing to 32) and r2's 24-token prompt
  // (6 blocks) fill the cache; r1's next block swaps r2 out part-way.
  SchedulerConfig config = ChunkedConfig(/*budget=*/4, /*gpu_blocks=*/10, /*cpu_blocks=*/16);
  config.preemption_mode = PreemptionMode::kSwap;
  Scheduler scheduler(config);
  SequenceGroup* first = Add(scheduler, 1, 12, /*max_tokens=*/20);
  while (first->seqs()[0]->num_output_tokens() == 0) Finish(scheduler, scheduler.Schedule());
  SequenceGroup* partial = Add(scheduler, 2, 24, /*max_tokens=*/4);
  bool swapped_mid_prefill = false;
  for (int step = 0; step < 300 && scheduler.HasUnfinished(); ++step) {
    SchedulerOutput output = scheduler.Schedule();
    EXPECT_TRUE(output.ignored.empty());
    const Sequence& seq = *partial->seqs()[0];
    if (seq.status() == SequenceStatus::kSwapped && seq.num_output_tokens() == 0) {
      swapped_mid_prefill = true;
      EXPECT_GT(seq.num_computed_tokens(), 0);  // Kept: its blocks went to the CPU.
    }
    Finish(scheduler, output);
  }
  EXPECT_TRUE(swapped_mid_prefill);
  EXPECT_FALSE(scheduler.HasUnfinished());
  EXPECT_EQ(partial->seqs()[0]->num_output_tokens(), 4);
  EXPECT_EQ(scheduler.block_manager().num_free_gpu_blocks(), 10);
  EXPECT_EQ(scheduler.block_manager().num_free_cpu_blocks(), 16);
}

TEST_F(ChunkedSchedulerTest, LongPrefillThresholdCapsEachChunk) {
  SchedulerConfig config = ChunkedConfig(/*budget=*/64, /*gpu_blocks=*/64);
  config.max_num_partial_prefills = 2;
  config.max_long_partial_prefills = 2;
  config.long_prefill_token_threshold = 5;
  Scheduler scheduler(config);
  Add(scheduler, 1, 30);
  Add(scheduler, 2, 30);
  Add(scheduler, 3, 30);
  SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 2u);  // Two may be left part-way.
  EXPECT_EQ(step.scheduled[0].num_tokens, 5);
  EXPECT_EQ(step.scheduled[1].num_tokens, 5);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  // A prompt that completes within its chunk needs no slot.
  Add(scheduler, 4, 3);
  Finish(scheduler, step);
  SchedulerOutput next = scheduler.Schedule();
  ASSERT_EQ(next.scheduled.size(), 2u);  // r3 still waits for a slot; r4 would too (FCFS).
}

TEST_F(ChunkedSchedulerTest, LongPromptsWaitForALongSlotWhileShorterOnesGoAhead) {
  // Three partial-prefill slots, one of them for prompts over 5 tokens:
  // r2 and r4 wait for r1's slot, keeping their order, while r3 (4 tokens)
  // goes ahead of them.
  SchedulerConfig config = ChunkedConfig(/*budget=*/64, /*gpu_blocks=*/64);
  config.max_num_partial_prefills = 3;
  config.max_long_partial_prefills = 1;
  config.long_prefill_token_threshold = 5;
  Scheduler scheduler(config);
  SequenceGroup* first = Add(scheduler, 1, 12, /*max_tokens=*/2);
  Add(scheduler, 2, 30);
  Add(scheduler, 3, 4);
  Add(scheduler, 4, 30);
  auto scheduled_ids = [](const SchedulerOutput& step) {
    std::vector<std::string> ids;
    for (const ScheduledSequence& entry : step.scheduled) ids.push_back(entry.group->request_id());
    return ids;
  };
  SchedulerOutput step = scheduler.Schedule();
  EXPECT_EQ(scheduled_ids(step), std::vector<std::string>({"r1", "r3"}));
  EXPECT_EQ(scheduler.num_waiting(), 2);
  // r1 is still part-way (5 of 12 tokens): its slot stays taken.
  Finish(scheduler, step);
  step = scheduler.Schedule();
  EXPECT_EQ(scheduled_ids(step), std::vector<std::string>({"r3", "r1"}));
  Finish(scheduler, step);
  // r1's last chunk (2 tokens) completes its prompt: the slot is free again,
  // and r2, first in line, takes it before r4.
  step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 3u);
  EXPECT_EQ(step.scheduled[1].group, first);
  EXPECT_EQ(step.scheduled[1].start_position, 10);
  EXPECT_EQ(step.scheduled[1].num_tokens, 2);
  EXPECT_EQ(step.scheduled[2].group->request_id(), "r2");
  EXPECT_EQ(scheduler.num_waiting(), 1);
}

TEST_F(ChunkedSchedulerTest, ShortPromptsNeedNoPartialPrefillSlot) {
  Scheduler scheduler(ChunkedConfig(/*budget=*/20, /*gpu_blocks=*/64));
  Add(scheduler, 1, 3);
  Add(scheduler, 2, 4);
  Add(scheduler, 3, 30);  // Left part-way: takes the one slot.
  Add(scheduler, 4, 30);  // Would be left part-way too: waits.
  SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 3u);
  EXPECT_EQ(step.scheduled[2].num_tokens, 13);
  EXPECT_EQ(step.num_prefill_tokens, 20);
  EXPECT_EQ(scheduler.num_waiting(), 1);
}

TEST_F(ChunkedSchedulerTest, PriorityWaitingRequestPreemptsTheLowestRankedRunningOne) {
  for (bool chunked : {false, true}) {
    SchedulerConfig config = ChunkedConfig(/*budget=*/64, /*gpu_blocks=*/64);
    config.enable_chunked_prefill = chunked;
    config.policy = SchedulingPolicy::kPriority;
    config.max_num_seqs = 2;
    Scheduler scheduler(config);
    SequenceGroup* r1 = Add(scheduler, 1, 4, 50, /*priority=*/1);
    SequenceGroup* r2 = Add(scheduler, 2, 4, 50, /*priority=*/3);
    Finish(scheduler, scheduler.Schedule());
    SequenceGroup* r3 = Add(scheduler, 3, 4, 50, /*priority=*/5);  // Ranks below both.
    SequenceGroup* r4 = Add(scheduler, 4, 4, 50, /*priority=*/2);  // Outranks r2.
    SchedulerOutput step = scheduler.Schedule();
    EXPECT_EQ(step.num_preempted, 1);
    EXPECT_EQ(r2->num_preemptions(), 1);
    EXPECT_EQ(r1->num_preemptions(), 0);
    EXPECT_EQ(r4->seqs()[0]->status(), SequenceStatus::kRunning);
    EXPECT_EQ(r3->seqs()[0]->status(), SequenceStatus::kWaiting);
    EXPECT_EQ(r2->seqs()[0]->status(), SequenceStatus::kWaiting);
    EXPECT_EQ(r2->seqs()[0]->num_computed_tokens(), 0);
  }
}

TEST_F(ChunkedSchedulerTest, MoreUrgentPromptGetsAStepOfItsOwn) {
  SchedulerConfig config = ChunkedConfig(/*budget=*/64, /*gpu_blocks=*/64);
  config.policy = SchedulingPolicy::kPriority;
  Scheduler scheduler(config);
  SequenceGroup* r1 = Add(scheduler, 1, 4, 50);
  SequenceGroup* r2 = Add(scheduler, 2, 4, 50);
  Finish(scheduler, scheduler.Schedule());
  SequenceGroup* urgent = Add(scheduler, 3, 6, 50, /*priority=*/-1);
  SequenceGroup* after = Add(scheduler, 4, 6, 50, /*priority=*/0);
  SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 1u);  // No decode, and not r4's prompt.
  EXPECT_EQ(step.scheduled[0].group, urgent);
  EXPECT_EQ(step.scheduled[0].num_tokens, 6);
  EXPECT_TRUE(step.scheduled[0].do_sample);
  EXPECT_EQ(step.num_prefill_groups, 1);
  EXPECT_EQ(step.num_preempted, 0);
  Finish(scheduler, step);
  // The paused decodes go on where they were, beside the urgent one's and
  // r4's prompt.
  step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 4u);
  EXPECT_EQ(step.scheduled[0].group, urgent);
  EXPECT_EQ(step.scheduled[1].group, r1);
  EXPECT_EQ(step.scheduled[1].start_position, 4);
  EXPECT_EQ(step.scheduled[2].group, r2);
  EXPECT_EQ(step.scheduled[3].group, after);
  EXPECT_EQ(r1->seqs()[0]->num_output_tokens(), 1);
}

TEST_F(ChunkedSchedulerTest, PromptsOfTheSameOrALowerPriorityShareTheDecodesStep) {
  for (int priority : {0, 1}) {
    SchedulerConfig config = ChunkedConfig(/*budget=*/64, /*gpu_blocks=*/64);
    config.policy = SchedulingPolicy::kPriority;
    Scheduler scheduler(config);
    Add(scheduler, 1, 4, 50);
    Add(scheduler, 2, 4, 50, /*priority=*/2);
    Finish(scheduler, scheduler.Schedule());
    Add(scheduler, 3, 6, 50, priority);  // Outranks r2 only.
    SchedulerOutput step = scheduler.Schedule();
    EXPECT_EQ(step.scheduled.size(), 3u) << priority;
    EXPECT_EQ(step.num_prefill_tokens, 6) << priority;
  }
}

TEST_F(ChunkedSchedulerTest, MoreUrgentPromptLongerThanTheBudgetIsChunkedBesideTheDecodes) {
  SchedulerConfig config = ChunkedConfig(/*budget=*/10, /*gpu_blocks=*/64);
  config.policy = SchedulingPolicy::kPriority;
  Scheduler scheduler(config);
  Add(scheduler, 1, 4, 50);
  Finish(scheduler, scheduler.Schedule());
  SequenceGroup* urgent = Add(scheduler, 2, 30, 50, /*priority=*/-1);
  SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(step.scheduled[1].group, urgent);
  EXPECT_EQ(step.scheduled[1].num_tokens, 9);
}

TEST_F(ChunkedSchedulerTest, FcfsIgnoresPriority) {
  SchedulerConfig config = ChunkedConfig(/*budget=*/64, /*gpu_blocks=*/64);
  config.max_num_seqs = 1;
  Scheduler scheduler(config);
  SequenceGroup* r1 = Add(scheduler, 1, 4, 8, /*priority=*/9);
  Add(scheduler, 2, 4, 8, /*priority=*/-9);
  SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.scheduled.size(), 1u);
  EXPECT_EQ(step.scheduled[0].group, r1);
  EXPECT_EQ(step.num_preempted, 0);
}

}  // namespace
}  // namespace pagoda::scheduler

#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"

#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine/kv_slot_usage.h"
#include "scheduler/engine/step_plan.h"

namespace pagoda::scheduler {
namespace {

const absl::Time kEpoch = absl::FromUnixSeconds(1'000'000);

class SchedulerTest : public ::testing::Test {
 protected:
  // Adds a request whose prompt is `prompt_len` tokens counting up from 100 * id.
  SequenceGroup* Add(Scheduler& scheduler, int id, int prompt_len, int max_tokens = 16) {
    std::vector<int32_t> prompt(prompt_len);
    std::iota(prompt.begin(), prompt.end(), 100 * id);
    StoppingOptions stopping;
    stopping.max_tokens = max_tokens;
    auto group =
        std::make_unique<SequenceGroup>("r" + std::to_string(id), std::move(prompt), next_seq_id_++,
                                        SamplingOptions{}, stopping, kEpoch + absl::Seconds(id));
    SequenceGroup* raw = group.get();
    scheduler.AddSequenceGroup(std::move(group));
    return raw;
  }

  // Feeds token `base + i` to the i-th sampling entry, runs the stop checks
  // and frees what finished.
  std::vector<std::unique_ptr<SequenceGroup>> Finish(Scheduler& scheduler,
                                                     const SchedulerOutput& output,
                                                     int32_t base = 7) {
    std::vector<GeneratedToken> sampled;
    for (size_t i = 0; i < output.scheduled.size(); ++i) {
      sampled.push_back({base + static_cast<int32_t>(i), -0.5f, {}});
    }
    OutputProcessor processor({/*eos=*/2}, scheduler.config().max_model_len, &scheduler);
    processor.Process(output, sampled);
    scheduler.CommitComputedBlocks(output);
    return scheduler.FreeFinished();
  }

  static std::vector<std::string> ScheduledRequests(const SchedulerOutput& output) {
    std::vector<std::string> ids;
    for (const auto& entry : output.scheduled) ids.push_back(entry.group->request_id());
    return ids;
  }

  int64_t next_seq_id_ = 1;
};

SchedulerConfig SmallConfig(int block_size, int gpu_blocks, int cpu_blocks = 0) {
  SchedulerConfig config;
  config.block_size = block_size;
  config.num_gpu_blocks = gpu_blocks;
  config.num_cpu_blocks = cpu_blocks;
  config.max_model_len = 64;
  config.max_num_batched_tokens = 64;
  return config;
}

TEST_F(SchedulerTest, Scenario4RecomputePreemptionReprefillsGeneratedTokens) {
  SchedulerConfig config = SmallConfig(/*block_size=*/4, /*gpu_blocks=*/2);
  config.max_num_seqs = 2;
  Scheduler scheduler(config);
  Add(scheduler, 1, 4, /*max_tokens=*/2);
  SequenceGroup* later = Add(scheduler, 2, 4);

  SchedulerOutput prefill = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(prefill), std::vector<std::string>({"r1", "r2"}));
  EXPECT_EQ(prefill.num_batched_tokens, 8);
  EXPECT_EQ(prefill.num_prefill_groups, 2);
  EXPECT_EQ(scheduler.block_manager().num_free_gpu_blocks(), 0);
  EXPECT_TRUE(Finish(scheduler, prefill, /*base=*/10).empty());  // r1 gets 10, r2 gets 11.

  SchedulerOutput decode = scheduler.Schedule();
  EXPECT_EQ(decode.num_preempted, 1);
  EXPECT_TRUE(decode.blocks_to_swap_out.empty());
  ASSERT_EQ(ScheduledRequests(decode), std::vector<std::string>({"r1"}));
  EXPECT_EQ(decode.scheduled[0].start_position, 4);
  EXPECT_EQ(decode.scheduled[0].num_tokens, 1);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  EXPECT_EQ(scheduler.num_running(), 1);
  Sequence& preempted = *later->seqs()[0];
  EXPECT_EQ(preempted.status(), SequenceStatus::kWaiting);
  EXPECT_EQ(preempted.num_computed_tokens(), 0);
  EXPECT_EQ(scheduler.block_manager().FindBlockTable(preempted.seq_id()), nullptr);
  EXPECT_EQ(scheduler.block_manager().GetBlockTable(1), std::vector<int>({0, 1}));
  auto finished = Finish(scheduler, decode, /*base=*/12);  // r1 reaches max_tokens.
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->request_id(), "r1");
  EXPECT_EQ(finished[0]->seqs()[0]->status(), SequenceStatus::kFinishedLength);
  EXPECT_EQ(scheduler.block_manager().num_free_gpu_blocks(), 2);

  SchedulerOutput reprefill = scheduler.Schedule();
  ASSERT_EQ(ScheduledRequests(reprefill), std::vector<std::string>({"r2"}));
  EXPECT_EQ(reprefill.scheduled[0].start_position, 0);
  EXPECT_EQ(reprefill.scheduled[0].num_tokens, 5);
  auto plan = BuildStepPlan(3, reprefill, scheduler.block_manager());
  ASSERT_EQ(plan.sequences_size(), 1);
  EXPECT_EQ(std::vector<int32_t>(plan.sequences(0).token_ids().begin(),
                                 plan.sequences(0).token_ids().end()),
            std::vector<int32_t>({200, 201, 202, 203, 11}));
  EXPECT_EQ(plan.sequences(0).block_table_size(), 2);
  EXPECT_EQ(plan.sequences(0).sample_index(), 1);
}

// r3 was preempted and has run fewer than block_size steps since: when r2
// needs a block, vLLM would preempt r3 again (the latest arrival); Pagoda
// spares it and preempts r2, which has not been preempted yet.
TEST_F(SchedulerTest, RecentlyPreemptedGroupIsSparedWhileAnotherVictimExists) {
  for (bool avoid_thrashing : {true, false}) {
    SchedulerConfig config = SmallConfig(/*block_size=*/4, /*gpu_blocks=*/4);
    config.avoid_thrashing = avoid_thrashing;
    Scheduler scheduler(config);
    Add(scheduler, 1, 4);
    SequenceGroup* r2 = Add(scheduler, 2, 4);
    SequenceGroup* r3 = Add(scheduler, 3, 4);
    r3->MarkPreempted();  // As if preempted earlier and just resumed.
    SchedulerOutput prefill = scheduler.Schedule();
    ASSERT_EQ(ScheduledRequests(prefill), std::vector<std::string>({"r1", "r2", "r3"}));
    Finish(scheduler, prefill);

    SchedulerOutput decode = scheduler.Schedule();  // Each needs a 2nd block; 1 is free.
    EXPECT_EQ(decode.num_preempted, 1);
    if (avoid_thrashing) {
      EXPECT_EQ(ScheduledRequests(decode), std::vector<std::string>({"r1", "r3"}));
      EXPECT_EQ(r2->num_preemptions(), 1);
      EXPECT_EQ(r3->num_preemptions(), 1);
    } else {
      EXPECT_EQ(ScheduledRequests(decode), std::vector<std::string>({"r1", "r2"}));
      EXPECT_EQ(r3->num_preemptions(), 2);
    }
    Finish(scheduler, decode);
  }
}

// r1 needs a block while r2 and r3 are spared: r1 gives way itself. r3 then
// needs a block with nobody else left, so it goes although it is spared.
TEST_F(SchedulerTest, SparedGroupsArePreemptedWhenNoOtherVictimExists) {
  SchedulerConfig config = SmallConfig(/*block_size=*/4, /*gpu_blocks=*/3);
  Scheduler scheduler(config);
  SequenceGroup* r1 = Add(scheduler, 1, 4);
  SequenceGroup* r2 = Add(scheduler, 2, 4);
  SequenceGroup* r3 = Add(scheduler, 3, 4);
  r2->MarkPreempted();
  r3->MarkPreempted();
  SchedulerOutput prefill = scheduler.Schedule();
  Finish(scheduler, prefill);
  SchedulerOutput decode = scheduler.Schedule();  // No block free.
  EXPECT_EQ(ScheduledRequests(decode), std::vector<std::string>({"r2"}));
  EXPECT_EQ(r1->num_preemptions(), 1);
  EXPECT_EQ(r2->num_preemptions(), 1);
  EXPECT_EQ(r3->num_preemptions(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 2);
}

TEST_F(SchedulerTest, MaxNumSeqsLimitsAdmission) {
  SchedulerConfig config = SmallConfig(4, 32);
  config.max_num_seqs = 2;
  Scheduler scheduler(config);
  for (int id = 1; id <= 3; ++id) Add(scheduler, id, 3);
  SchedulerOutput first = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(first), std::vector<std::string>({"r1", "r2"}));
  EXPECT_EQ(scheduler.num_waiting(), 1);
  Finish(scheduler, first);
  // Running groups keep their seats: r3 cannot join, the two decode.
  SchedulerOutput second = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(second), std::vector<std::string>({"r1", "r2"}));
  EXPECT_EQ(second.num_prefill_groups, 0);
  EXPECT_EQ(scheduler.num_waiting(), 1);
}

TEST_F(SchedulerTest, TokenBudgetLimitsAdmissionInArrivalOrder) {
  SchedulerConfig config = SmallConfig(4, 32);
  config.max_num_batched_tokens = 10;
  config.max_model_len = 10;
  Scheduler scheduler(config);
  Add(scheduler, 1, 6);
  Add(scheduler, 2, 8);  // Does not fit next to r1.
  Add(scheduler, 3, 2);  // Would fit, but may not overtake r2 (FCFS).
  SchedulerOutput first = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(first), std::vector<std::string>({"r1"}));
  EXPECT_EQ(first.num_batched_tokens, 6);
  Finish(scheduler, first);
  // Prefills go first: r2 and r3 (8 + 2 = 10 tokens) are admitted together.
  SchedulerOutput second = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(second), std::vector<std::string>({"r2", "r3"}));
  EXPECT_EQ(second.num_batched_tokens, 10);
}

TEST_F(SchedulerTest, TooLongPromptsAreIgnoredAndTheQueueMovesOn) {
  SchedulerConfig config = SmallConfig(4, 4);
  config.max_model_len = 32;
  config.max_num_batched_tokens = 20;
  config.watermark = 0.0;
  Scheduler scheduler(config);
  Add(scheduler, 1, 21);  // Over the token budget.
  Add(scheduler, 2, 17);  // Fits the budget but needs 5 of 4 blocks: NEVER.
  Add(scheduler, 3, 5);
  SchedulerOutput output = scheduler.Schedule();
  ASSERT_EQ(output.ignored.size(), 2u);
  EXPECT_EQ(output.ignored[0]->request_id(), "r1");
  EXPECT_EQ(output.ignored[1]->request_id(), "r2");
  EXPECT_EQ(output.ignored[0]->seqs()[0]->status(), SequenceStatus::kFinishedIgnored);
  EXPECT_EQ(output.ignored[1]->seqs()[0]->status(), SequenceStatus::kFinishedIgnored);
  EXPECT_EQ(ScheduledRequests(output), std::vector<std::string>({"r3"}));
  EXPECT_EQ(scheduler.num_waiting(), 0);
}

TEST_F(SchedulerTest, LaterWaitsUntilBlocksAreFreed) {
  SchedulerConfig config = SmallConfig(4, 4);
  config.watermark = 0.0;
  Scheduler scheduler(config);
  Add(scheduler, 1, 12, /*max_tokens=*/1);  // 3 blocks.
  Add(scheduler, 2, 8);                     // 2 blocks: LATER.
  SchedulerOutput first = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(first), std::vector<std::string>({"r1"}));
  EXPECT_TRUE(first.ignored.empty());
  EXPECT_EQ(scheduler.num_waiting(), 1);
  EXPECT_EQ(Finish(scheduler, first).size(), 1u);
  SchedulerOutput second = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(second), std::vector<std::string>({"r2"}));
}

TEST_F(SchedulerTest, AbortFreesBlocksInEveryQueue) {
  SchedulerConfig config = SmallConfig(4, 3, /*cpu_blocks=*/8);
  config.watermark = 0.0;
  config.preemption_mode = PreemptionMode::kSwap;
  Scheduler scheduler(config);
  Add(scheduler, 1, 4);
  Add(scheduler, 2, 4);
  Finish(scheduler, scheduler.Schedule());  // Both prefilled: 2 blocks, both full.
  Add(scheduler, 3, 4);                     // Admitted next (1 block left).
  Finish(scheduler, scheduler.Schedule());
  Add(scheduler, 4, 4);  // Stays waiting: r3 is swapped out below.
  SchedulerOutput decode = scheduler.Schedule();
  EXPECT_EQ(decode.num_preempted, 2);  // r3 and r2 go to the CPU so r1 can grow.
  EXPECT_FALSE(decode.blocks_to_swap_out.empty());
  EXPECT_EQ(scheduler.num_running(), 1);
  EXPECT_EQ(scheduler.num_swapped(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  EXPECT_EQ(scheduler.block_manager().num_free_cpu_blocks(), 6);

  auto swapped = scheduler.AbortRequest("r2");
  ASSERT_NE(swapped, nullptr);
  EXPECT_EQ(swapped->seqs()[0]->status(), SequenceStatus::kFinishedAborted);
  EXPECT_EQ(scheduler.block_manager().num_free_cpu_blocks(), 7);
  auto running = scheduler.AbortRequest("r1");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(scheduler.block_manager().num_free_gpu_blocks(), 3);
  auto waiting = scheduler.AbortRequest("r4");
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(waiting->seqs()[0]->status(), SequenceStatus::kFinishedAborted);
  EXPECT_EQ(scheduler.AbortRequest("r4"), nullptr);
  EXPECT_EQ(scheduler.num_waiting(), 0);

  auto rest = scheduler.AbortAll();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0]->request_id(), "r3");
  EXPECT_FALSE(scheduler.HasUnfinished());
  EXPECT_EQ(scheduler.block_manager().num_free_gpu_blocks(), 3);
  EXPECT_EQ(scheduler.block_manager().num_free_cpu_blocks(), 8);
  EXPECT_TRUE(scheduler.block_manager().block_tables().empty());
}

TEST_F(SchedulerTest, RecomputedGroupThatOutgrewTheBudgetIsIgnoredNotWedged) {
  SchedulerConfig config = SmallConfig(4, 4);
  config.watermark = 0.0;
  config.max_num_batched_tokens = 8;
  Scheduler scheduler(config);
  Add(scheduler, 1, 4);
  SequenceGroup* later = Add(scheduler, 2, 4);
  // Both grow to 9 tokens (3 blocks each would be needed, 4 exist).
  for (int step = 0; step < 5; ++step) {
    SchedulerOutput output = scheduler.Schedule();
    ASSERT_EQ(output.num_preempted, 0) << step;
    Finish(scheduler, output);
  }
  EXPECT_EQ(later->seqs()[0]->length(), 9);
  SchedulerOutput preempting = scheduler.Schedule();
  EXPECT_EQ(preempting.num_preempted, 1);
  EXPECT_EQ(ScheduledRequests(preempting), std::vector<std::string>({"r1"}));
  Finish(scheduler, preempting);
  // 9 tokens can never be prefilled under an 8-token budget.
  SchedulerOutput next = scheduler.Schedule();
  ASSERT_EQ(next.ignored.size(), 1u);
  EXPECT_EQ(next.ignored[0]->request_id(), "r2");
  EXPECT_EQ(next.ignored[0]->seqs()[0]->status(), SequenceStatus::kFinishedIgnored);
  EXPECT_EQ(ScheduledRequests(next), std::vector<std::string>({"r1"}));
  EXPECT_EQ(scheduler.num_waiting(), 0);
}

TEST_F(SchedulerTest, ForcedSwapFallsBackToRecomputeWithoutSwapSpace) {
  SchedulerConfig config = SmallConfig(4, 2, /*cpu_blocks=*/0);
  config.watermark = 0.0;
  config.preemption_mode = PreemptionMode::kSwap;
  Scheduler scheduler(config);
  Add(scheduler, 1, 4);
  Add(scheduler, 2, 4);
  Finish(scheduler, scheduler.Schedule());
  SchedulerOutput decode = scheduler.Schedule();
  EXPECT_EQ(decode.num_preempted, 1);
  EXPECT_TRUE(decode.blocks_to_swap_out.empty());
  EXPECT_EQ(scheduler.num_swapped(), 0);
  EXPECT_EQ(scheduler.num_waiting(), 1);
}

// Scenario 5: a parallel-sampling group (two live sequences sharing their
// prompt block) is swapped out whole, and swapped back in before any new
// prompt is admitted.
TEST_F(SchedulerTest, Scenario5SwapPreemptionOfParallelSamplingGroup) {
  SchedulerConfig config = SmallConfig(4, 4, /*cpu_blocks=*/4);
  config.watermark = 0.0;
  Scheduler scheduler(config);
  Add(scheduler, 1, 4, /*max_tokens=*/2);
  SequenceGroup* pair = Add(scheduler, 2, 5);
  Finish(scheduler, scheduler.Schedule());  // r1: [0] (5 tokens), r2: [1, 2] (6 tokens).
  Sequence& parent = *pair->seqs()[0];
  Sequence* child = pair->AddForkedSequence(parent, 99);
  scheduler.block_manager().Fork(parent, *child);
  EXPECT_EQ(scheduler.block_manager().num_free_gpu_blocks(), 1);

  // r1 takes the last block; r2 needs one per live sequence and goes to the
  // CPU whole (two live sequences: swap, not recompute).
  SchedulerOutput decode = scheduler.Schedule();
  EXPECT_EQ(decode.num_preempted, 1);
  EXPECT_EQ(ScheduledRequests(decode), std::vector<std::string>({"r1"}));
  ASSERT_EQ(decode.blocks_to_swap_out.size(), 2u);  // Shared blocks move once.
  EXPECT_EQ(parent.status(), SequenceStatus::kSwapped);
  EXPECT_EQ(child->status(), SequenceStatus::kSwapped);
  for (int block : scheduler.block_manager().GetBlockTable(parent.seq_id())) {
    EXPECT_EQ(scheduler.block_manager().cpu_pool().ref_count(block), 2);
  }
  Add(scheduler, 3, 2);
  EXPECT_EQ(Finish(scheduler, decode).size(), 1u);  // r1 finishes; 4 blocks free.
  EXPECT_EQ(scheduler.num_swapped(), 1);

  // The swapped group comes back before r3 is admitted.
  SchedulerOutput swap_in = scheduler.Schedule();
  EXPECT_EQ(swap_in.num_prefill_groups, 0);
  EXPECT_EQ(swap_in.blocks_to_swap_in.size(), 2u);
  EXPECT_EQ(ScheduledRequests(swap_in), std::vector<std::string>({"r2", "r2"}));
  EXPECT_EQ(swap_in.scheduled[0].start_position, 5);
  EXPECT_EQ(swap_in.scheduled[0].num_tokens, 1);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  EXPECT_EQ(scheduler.num_swapped(), 0);
  EXPECT_EQ(scheduler.block_manager().num_free_cpu_blocks(), 4);
  // Both write position 5 into their shared last block: the first copies.
  ASSERT_EQ(swap_in.blocks_to_copy.size(), 1u);
  const auto& parent_table = scheduler.block_manager().GetBlockTable(parent.seq_id());
  const auto& child_table = scheduler.block_manager().GetBlockTable(child->seq_id());
  ASSERT_EQ(parent_table.size(), 2u);
  ASSERT_EQ(child_table.size(), 2u);
  EXPECT_EQ(parent_table[0], child_table[0]);
  EXPECT_NE(parent_table[1], child_table[1]);
  Finish(scheduler, swap_in);
  SchedulerOutput admit = scheduler.Schedule();
  EXPECT_EQ(ScheduledRequests(admit), std::vector<std::string>({"r3"}));
}

TEST_F(SchedulerTest, DecodeIntoSharedPartialBlockCopiesOnWrite) {
  SchedulerConfig config = SmallConfig(4, 8);
  Scheduler scheduler(config);
  SequenceGroup* group = Add(scheduler, 1, 2);
  Finish(scheduler, scheduler.Schedule());  // 3 tokens in block 0.
  Sequence& parent = *group->seqs()[0];
  Sequence* child = group->AddForkedSequence(parent, 50);
  scheduler.block_manager().Fork(parent, *child);
  SchedulerOutput decode = scheduler.Schedule();
  ASSERT_EQ(decode.blocks_to_copy.size(), 1u);
  EXPECT_EQ(decode.blocks_to_copy[0].src, 0);
  EXPECT_EQ(decode.blocks_to_copy[0].dst, 1);
  EXPECT_EQ(decode.scheduled.size(), 2u);
  auto plan = BuildStepPlan(7, decode, scheduler.block_manager());
  ASSERT_EQ(plan.copy_size(), 1);
  EXPECT_EQ(plan.step_id(), 7);
  EXPECT_NE(plan.sequences(0).block_table(0), plan.sequences(1).block_table(0));
}

TEST_F(SchedulerTest, KvSlotUsageCountsComputedTokensAndSharedBlocksOnce) {
  Scheduler scheduler(SmallConfig(/*block_size=*/4, /*gpu_blocks=*/16));
  Add(scheduler, 1, 5);
  SequenceGroup* pair = Add(scheduler, 2, 9);
  // One meter for every call: each must start from a clean scratch.
  KvSlotUsageMeter meter;
  EXPECT_EQ(meter.Measure(scheduler).allocated_slots, 0);  // Nothing running yet.

  // Prefill: 5 tokens in 2 blocks, 9 tokens in 3 blocks.
  Finish(scheduler, scheduler.Schedule());
  KvSlotUsage usage = meter.Measure(scheduler);
  EXPECT_EQ(usage.filled_slots, 5 + 9);
  EXPECT_EQ(usage.allocated_slots, (2 + 3) * 4);

  // A fork shares all three blocks of r2: nothing new is held or filled.
  Sequence& parent = *pair->seqs()[0];
  Sequence* child = pair->AddForkedSequence(parent, 99);
  scheduler.block_manager().Fork(parent, *child);
  usage = meter.Measure(scheduler);
  EXPECT_EQ(usage.filled_slots, 5 + 9);
  EXPECT_EQ(usage.allocated_slots, (2 + 3) * 4);

  // Decode: r1 fills its 6th slot; r2's parent writes into the shared last
  // block's 10th slot, so the child copies that block on write.
  SchedulerOutput decode = scheduler.Schedule();
  EXPECT_EQ(decode.blocks_to_copy.size(), 1u);
  Finish(scheduler, decode);
  usage = meter.Measure(scheduler);
  EXPECT_EQ(usage.filled_slots, 6 + 8 + 2 + 2);  // r1; r2's two shared blocks; two last blocks.
  EXPECT_EQ(usage.allocated_slots, (2 + 4) * 4);
}

// vLLM's num_cached_tokens: the prompt tokens the prefix cache held at the
// group's first admission, in every delta of the request; kept when the
// group is admitted again (recompute preemption, worker recovery).
TEST_F(SchedulerTest, CachedPromptTokensAreTheFirstAdmissionsPrefixHits) {
  Scheduler scheduler(SmallConfig(/*block_size=*/4, /*gpu_blocks=*/16));
  OutputProcessor processor({/*eos=*/2}, scheduler.config().max_model_len, &scheduler);
  std::vector<int32_t> prompt(10);
  std::iota(prompt.begin(), prompt.end(), 300);
  std::vector<int> cached;
  for (int i = 0; i < 2; ++i) {
    StoppingOptions stopping;
    stopping.max_tokens = 4;
    scheduler.AddSequenceGroup(std::make_unique<SequenceGroup>(
        "c" + std::to_string(i), prompt, next_seq_id_++, SamplingOptions{}, stopping, kEpoch));
    const SchedulerOutput output = scheduler.Schedule();
    ASSERT_EQ(output.scheduled.size(), 1u);
    const std::vector<RequestDelta> deltas =
        processor.Process(output, {{7, -0.5f, {}}});  // One token: the prompt is computed.
    scheduler.CommitComputedBlocks(output);
    ASSERT_EQ(deltas.size(), 1u);
    cached.push_back(deltas[0].num_cached_tokens);
    EXPECT_EQ(output.scheduled[0].group->num_cached_prompt_tokens(), cached.back());
    EXPECT_NE(scheduler.AbortRequest("c" + std::to_string(i)), nullptr);
  }
  // The first computed all 10; the second found the 2 full blocks before
  // its last token.
  EXPECT_EQ(cached, std::vector<int>({0, 8}));
  SequenceGroup group("g", prompt, next_seq_id_++, SamplingOptions{}, StoppingOptions{}, kEpoch);
  EXPECT_EQ(group.num_cached_prompt_tokens(), 0);
  group.RecordCachedPromptTokens(8);
  group.RecordCachedPromptTokens(0);  // Admitted again after a preemption.
  EXPECT_EQ(group.num_cached_prompt_tokens(), 8);
}

}  // namespace
}  // namespace pagoda::scheduler

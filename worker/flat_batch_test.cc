#include "worker/flat_batch.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
namespace v1 = ::pagoda::worker::v1;
using ::testing::ElementsAre;

SequenceStep* AddStep(StepPlan& plan, int64_t seq_id, std::vector<int> tokens, int start,
                      std::vector<int> table, bool sample) {
  SequenceStep* step = plan.add_sequences();
  step->set_seq_id(seq_id);
  for (int t : tokens) step->add_token_ids(t);
  step->set_start_position(start);
  for (int b : table) step->add_block_table(b);
  step->set_do_sample(sample);
  return step;
}

TEST(FlattenStepPlanTest, FlattensMixedPrefillAndDecode) {
  StepPlan plan;
  // Prefill of 5 tokens over blocks 7, 2 (block size 4); a decode at
  // position 9 (block index 2 -> block 0); a prefill chunk after a cached
  // prefix of 3 that does not sample. Extra table entries are allowed.
  AddStep(plan, 11, {1, 2, 3, 4, 5}, 0, {7, 2, 9}, true);
  AddStep(plan, 12, {6}, 9, {3, 4, 0}, true);
  AddStep(plan, 13, {7, 8}, 3, {5, 1}, false);
  auto copy = plan.add_copy();
  copy->set_src(1);
  copy->set_dst(6);
  auto batch = FlattenStepPlan(
      plan,
      BatchLimits{.vocab_size = 10, .block_size = 4, .num_gpu_blocks = 10, .num_cpu_blocks = 2});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(batch->input_ids, ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_THAT(batch->positions, ElementsAre(0, 1, 2, 3, 4, 9, 3, 4));
  EXPECT_THAT(batch->slot_mapping, ElementsAre(28, 29, 30, 31, 8, 1, 23, 4));
  EXPECT_THAT(batch->query_start, ElementsAre(0, 5, 6, 8));
  EXPECT_THAT(batch->context_lens, ElementsAre(5, 10, 5));
  EXPECT_EQ(batch->max_blocks_per_seq, 3);
  EXPECT_THAT(batch->block_tables, ElementsAre(7, 2, 0, 3, 4, 0, 5, 1, 0));
  EXPECT_THAT(batch->logits_indices, ElementsAre(4, 5));
  EXPECT_THAT(batch->sample_sequences, ElementsAre(0, 1));
  ASSERT_EQ(batch->copy.size(), 1u);
  EXPECT_EQ(batch->copy[0].src, 1);
  EXPECT_EQ(batch->copy[0].dst, 6);
  EXPECT_TRUE(batch->swap_in.empty());
}

TEST(FlattenStepPlanTest, RefusesBlockMovesThatWriteABlockTwiceOrCopyFromACopiedBlock) {
  const BatchLimits limits{
      .vocab_size = 10, .block_size = 4, .num_gpu_blocks = 10, .num_cpu_blocks = 4};
  auto flatten = [&](const std::vector<std::pair<int, int>>& copies,
                     const std::vector<std::pair<int, int>>& swaps_in) {
    StepPlan plan;
    AddStep(plan, 1, {1}, 0, {0}, true);
    for (auto [src, dst] : copies) {
      auto* move = plan.add_copy();
      move->set_src(src);
      move->set_dst(dst);
    }
    for (auto [src, dst] : swaps_in) {
      auto* move = plan.add_swap_in();
      move->set_src(src);
      move->set_dst(dst);
    }
    return FlattenStepPlan(plan, limits);
  };
  // One source to two blocks, and swaps from different host blocks: fine.
  EXPECT_TRUE(flatten({{1, 6}, {1, 7}}, {{0, 8}, {1, 9}}).ok());
  // Two copies into block 6, and two swaps into block 8.
  EXPECT_EQ(flatten({{1, 6}, {2, 6}}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flatten({}, {{0, 8}, {1, 8}}).status().code(), absl::StatusCode::kInvalidArgument);
  // A chain (0 -> 1, 1 -> 2) whose result would depend on the order, and a
  // block copied onto itself.
  auto chain = flatten({{0, 1}, {1, 2}}, {});
  EXPECT_EQ(chain.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(chain.status().message()), ::testing::HasSubstr("block 1"));
  EXPECT_EQ(flatten({{3, 3}}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  // Swaps go between two caches, so a host block number equal to a device
  // destination is no conflict.
  EXPECT_TRUE(flatten({}, {{2, 2}}).ok());
}

TEST(FlattenStepPlanTest, ChecksOnlyTheBlocksTheContextNeeds) {
  StepPlan plan;
  // 4 tokens need one block of 4; the stale id past it is not read.
  AddStep(plan, 1, {1, 2, 3, 4}, 0, {0, 99}, true);
  EXPECT_TRUE(FlattenStepPlan(plan, BatchLimits{10, 4, 2, 0}).ok());
  AddStep(plan, 2, {1}, 4, {1}, true);  // Position 4 needs a second block.
  auto batch = FlattenStepPlan(plan, BatchLimits{10, 4, 2, 0});
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(batch.status().message()), ::testing::HasSubstr("seq_id 2"));
}

TEST(FlattenStepPlanTest, RefusesPositionsPastTheRotaryTable) {
  const BatchLimits limits{.vocab_size = 10,
                           .block_size = 4,
                           .num_gpu_blocks = 10,
                           .num_cpu_blocks = 0,
                           .max_positions = 8};
  StepPlan fits;
  AddStep(fits, 1, {1, 2}, 6, {0, 1}, true);  // Positions 6 and 7.
  EXPECT_TRUE(FlattenStepPlan(fits, limits).ok());
  StepPlan past;
  AddStep(past, 2, {1, 2, 3}, 6, {0, 1, 2}, true);  // Position 8.
  auto refused = FlattenStepPlan(past, limits);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("rotary table"));
  // A start near INT32_MAX would overflow the int32 positions: refused too.
  StepPlan huge;
  AddStep(huge, 3, {1}, std::numeric_limits<int32_t>::max(), {0}, true);
  EXPECT_EQ(FlattenStepPlan(huge, BatchLimits{.vocab_size = 10, .block_size = 4,
                                              .num_gpu_blocks = 10})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FlattenStepPlanTest, RefusesRowDeltasTheServiceDidNotResolve) {
  const BatchLimits limits{.vocab_size = 10, .block_size = 4, .num_gpu_blocks = 10};
  StepPlan table;
  AddStep(table, 4, {1}, 0, {0}, true);
  table.mutable_sequences(0)->set_block_table_start(1);
  StepPlan sampling;
  AddStep(sampling, 5, {1}, 0, {0}, true);
  sampling.mutable_sequences(0)->set_sampling_unchanged(true);
  StepPlan grown;
  AddStep(grown, 6, {1}, 0, {0}, true);
  grown.mutable_sequences(0)->mutable_sampling_delta()->add_appended_output_token_ids(3);
  for (const StepPlan* plan : {&table, &sampling, &grown}) {
    auto refused = FlattenStepPlan(*plan, limits);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("not resolved"));
  }
}

TEST(FlattenStepPlanTest, ChecksAndCarriesTokenMasks) {
  auto mask_of = [](std::vector<uint32_t> words) {
    return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 4);
  };
  const BatchLimits limits{.vocab_size = 40, .block_size = 4, .num_gpu_blocks = 10, .num_cpu_blocks = 2};
  StepPlan plan;
  AddStep(plan, 1, {1}, 0, {0}, true)->mutable_sampling()->set_token_mask(mask_of({0x5, 0x80}));
  AddStep(plan, 2, {1}, 0, {1}, true);
  AddStep(plan, 3, {1}, 0, {2}, true)->mutable_sampling()->set_processed_logprobs(true);
  auto batch = FlattenStepPlan(plan, limits);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(batch->mask_offsets, ElementsAre(0, -1, -1));
  EXPECT_THAT(batch->token_masks, ElementsAre(0x5u, 0x80u));
  EXPECT_THAT(batch->processed_logprobs, ElementsAre(0, 0, 1));  // Beam search's rows.

  for (const std::string& bad : {mask_of({0x5}), mask_of({0, 0}), mask_of({0x1, 0x100}),
                                 mask_of({1, 0, 0})}) {
    StepPlan refused;
    AddStep(refused, 1, {1}, 0, {0}, true)->mutable_sampling()->set_token_mask(bad);
    auto result = FlattenStepPlan(refused, limits);
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.status().message().find("token_mask"), std::string::npos) << result.status();
  }
}

// Masks that follow the plan (SequenceStep.token_mask_follows): their words
// are reserved at flattening, then filled by ApplyStepMasks, which refuses
// whatever does not answer the plan and then leaves the batch as it was.
TEST(ApplyStepMasksTest, FillsTheReservedRowsAndRefusesMasksThatDoNotFitThePlan) {
  auto mask_of = [](std::vector<uint32_t> words) {
    return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 4);
  };
  const BatchLimits limits{.vocab_size = 40, .block_size = 4, .num_gpu_blocks = 10, .num_cpu_blocks = 2};
  StepPlan plan;
  plan.set_step_id(7);
  AddStep(plan, 1, {1}, 0, {0}, true)->set_token_mask_follows(true);
  AddStep(plan, 2, {1}, 0, {1}, true);
  AddStep(plan, 3, {1}, 0, {2}, true)->set_token_mask_follows(true);
  auto flat = FlattenStepPlan(plan, limits);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_THAT(flat->mask_offsets, ElementsAre(0, -1, 2));
  EXPECT_THAT(flat->token_masks, ElementsAre(0u, 0u, 0u, 0u));
  EXPECT_THAT(flat->pending_mask_rows, ElementsAre(0, 2));

  auto masks_for = [&](int64_t step_id, std::vector<std::pair<int64_t, std::string>> rows) {
    v1::StepMasks masks;
    masks.set_step_id(step_id);
    for (const auto& [seq_id, mask] : rows) {
      v1::RowTokenMask* row = masks.add_rows();
      row->set_seq_id(seq_id);
      row->set_token_mask(mask);
    }
    return masks;
  };
  const std::string good = mask_of({0x6, 0x1});
  const std::vector<v1::StepMasks> refused = {
      masks_for(8, {{1, good}, {3, good}}),                  // Another step's.
      masks_for(7, {{1, good}}),                             // A row short.
      masks_for(7, {{1, good}, {3, good}, {2, good}}),       // A row too many.
      masks_for(7, {{3, good}, {1, good}}),                  // Out of order.
      masks_for(7, {{1, good}, {3, mask_of({0x6})}}),        // Too short.
      masks_for(7, {{1, good}, {3, mask_of({1, 0x100})}}),   // Past the vocabulary.
      masks_for(7, {{1, good}, {3, mask_of({0, 0})}}),       // Allows nothing.
  };
  for (const v1::StepMasks& masks : refused) {
    FlatBatch batch = *flat;
    absl::Status status = ApplyStepMasks(plan, masks, limits.vocab_size, &batch);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << masks.DebugString();
    EXPECT_EQ(batch.token_masks, flat->token_masks) << status;
    EXPECT_EQ(batch.mask_offsets, flat->mask_offsets) << status;
  }

  // An empty row mask: that draw is unconstrained.
  FlatBatch batch = *flat;
  ASSERT_TRUE(ApplyStepMasks(plan, masks_for(7, {{1, ""}, {3, good}}), 40, &batch).ok());
  EXPECT_THAT(batch.mask_offsets, ElementsAre(-1, -1, 2));
  EXPECT_THAT(batch.token_masks, ElementsAre(0u, 0u, 0x6u, 0x1u));
  EXPECT_FALSE(batch.awaits_masks());

  // The promise itself is checked with the plan.
  for (bool sample : {false, true}) {
    StepPlan bad;
    SequenceStep* step = AddStep(bad, 1, {1}, 0, {0}, sample);
    step->set_token_mask_follows(true);
    if (sample) step->mutable_sampling()->set_token_mask(good);
    EXPECT_EQ(FlattenStepPlan(bad, limits).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// A row with drafts whose masks follow: one mask per verified position, in
// order, each landing on its own logits row (row j samples after draft j).
TEST(ApplyStepMasksTest, GivesEachVerifiedPositionOfARowWithDraftsItsOwnMask) {
  auto mask_of = [](std::vector<uint32_t> words) {
    return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 4);
  };
  const BatchLimits limits{
      .vocab_size = 40, .block_size = 4, .num_gpu_blocks = 10, .num_cpu_blocks = 2};
  StepPlan plan;
  plan.set_step_id(3);
  SequenceStep* drafted = AddStep(plan, 1, {1}, 0, {0}, true);
  drafted->set_token_mask_follows(true);
  drafted->add_draft_token_ids(5);
  drafted->add_draft_token_ids(6);
  AddStep(plan, 2, {1}, 0, {1}, true)->set_token_mask_follows(true);
  auto flat = FlattenStepPlan(plan, limits);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_THAT(flat->pending_mask_rows, ElementsAre(0, 1, 2, 3));

  v1::StepMasks masks;
  masks.set_step_id(3);
  for (auto [seq_id, word] :
       {std::pair{1, 0x20u}, std::pair{1, 0x40u}, std::pair{1, 0x80u}, std::pair{2, 0x100u}}) {
    v1::RowTokenMask* row = masks.add_rows();
    row->set_seq_id(seq_id);
    row->set_token_mask(mask_of({word, 0}));
  }
  FlatBatch batch = *flat;
  ASSERT_TRUE(ApplyStepMasks(plan, masks, limits.vocab_size, &batch).ok());
  for (auto [row, word] :
       {std::pair{0, 0x20u}, std::pair{1, 0x40u}, std::pair{2, 0x80u}, std::pair{3, 0x100u}}) {
    EXPECT_EQ(batch.token_masks[batch.mask_offsets[row]], word) << "logits row " << row;
  }
  // One mask for the row with drafts is a row short; an inline mask cannot
  // cover the drafts' positions.
  masks.mutable_rows()->DeleteSubrange(1, 2);
  batch = *flat;
  EXPECT_EQ(ApplyStepMasks(plan, masks, limits.vocab_size, &batch).code(),
            absl::StatusCode::kInvalidArgument);
  drafted->set_token_mask_follows(false);
  drafted->mutable_sampling()->set_token_mask(mask_of({0x20, 0}));
  EXPECT_EQ(FlattenStepPlan(plan, limits).status().code(), absl::StatusCode::kInvalidArgument);
}

// What a plan's placeholders refer to: step 7 sampled seq_id 1 (token 9)
// and seq_id 2 (token 4) without drafts, seq_id 3 with drafts.
LastSampledTokens SampledInStep7() {
  StepPlan plan;
  plan.set_step_id(7);
  AddStep(plan, 1, {2}, 4, {0, 1}, true);
  AddStep(plan, 2, {3}, 4, {2, 3}, true);
  AddStep(plan, 3, {5}, 4, {4, 5}, true)->add_draft_token_ids(6);
  v1::StepResult result;
  for (auto [seq_id, token] : {std::pair{1, 9}, std::pair{2, 4}, std::pair{3, 8}}) {
    auto* sampled = result.add_tokens();
    sampled->set_seq_id(seq_id);
    sampled->set_token_id(token);
  }
  LastSampledTokens last;
  last.Record(plan, &result);
  return last;
}

TEST(FlattenStepPlanTest, SubstitutesPlaceholdersAndCountsTheirTokens) {
  const LastSampledTokens last = SampledInStep7();
  EXPECT_EQ(last.size(), 2);  // Not seq_id 3: a row with drafts returns a run.
  const BatchLimits limits{.vocab_size = 10,
                           .block_size = 4,
                           .num_gpu_blocks = 10,
                           .num_cpu_blocks = 0,
                           .last_sampled = &last};
  StepPlan plan;
  plan.set_step_id(8);
  SequenceStep* one = AddStep(plan, 1, {0}, 5, {0, 1}, true);
  one->set_input_from_last_sample(true);
  one->mutable_sampling()->set_frequency_penalty(0.5f);
  one->mutable_sampling()->add_output_token_ids(2);
  one->mutable_sampling()->add_output_token_counts(1);
  AddStep(plan, 5, {7, 7}, 0, {6}, true);
  SequenceStep* two = AddStep(plan, 2, {0}, 5, {2, 3}, true);
  two->set_input_from_last_sample(true);
  two->mutable_sampling()->set_presence_penalty(1.0f);
  two->mutable_sampling()->add_output_token_ids(4);
  two->mutable_sampling()->add_output_token_counts(2);
  auto batch = FlattenStepPlan(plan, limits);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(batch->input_ids, ElementsAre(9, 7, 7, 4));
  EXPECT_THAT(batch->placeholder_rows, ElementsAre(0, 3));
  // Row 0 counts token 9 once more (the server's counts stop before it);
  // row 2 already counted token 4 twice: now three times.
  ASSERT_THAT(batch->edit_offsets, ElementsAre(0, 2, 2, 3));
  EXPECT_EQ(batch->edits[0].token_id, 2);
  EXPECT_EQ(batch->edits[0].output_count, 1);
  EXPECT_EQ(batch->edits[1].token_id, 9);
  EXPECT_EQ(batch->edits[1].output_count, 1);
  EXPECT_EQ(batch->edits[2].token_id, 4);
  EXPECT_EQ(batch->edits[2].output_count, 3);

  // Another rank knows the seq_ids, not the tokens: 0 until they are shared.
  StepPlan sampled;
  AddStep(sampled, 1, {2}, 4, {0, 1}, true);
  LastSampledTokens other_rank;
  other_rank.Record(sampled, nullptr);
  StepPlan next;
  next.set_step_id(1);
  AddStep(next, 1, {3}, 5, {0, 1}, true)->set_input_from_last_sample(true);
  BatchLimits other_limits = limits;
  other_limits.last_sampled = &other_rank;
  auto other = FlattenStepPlan(next, other_limits);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_THAT(other->input_ids, ElementsAre(0));
  EXPECT_THAT(other->placeholder_rows, ElementsAre(0));
}

// Structured outputs under overlap: the mask of a placeholder row follows
// the plan (the server computes it once the previous step's token is in);
// the row gets its substituted token and its reserved mask words, which
// ApplyStepMasks fills as for any other row.
TEST(FlattenStepPlanTest, APlaceholderRowsMaskMayFollowThePlan) {
  const LastSampledTokens last = SampledInStep7();
  const BatchLimits limits{.vocab_size = 10,
                           .block_size = 4,
                           .num_gpu_blocks = 10,
                           .num_cpu_blocks = 0,
                           .last_sampled = &last};
  StepPlan plan;
  plan.set_step_id(8);
  AddStep(plan, 5, {7, 7}, 0, {6}, true);
  SequenceStep* constrained = AddStep(plan, 2, {0}, 5, {2, 3}, true);
  constrained->set_input_from_last_sample(true);
  constrained->set_token_mask_follows(true);
  auto batch = FlattenStepPlan(plan, limits);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(batch->input_ids, ElementsAre(7, 7, 4));
  EXPECT_THAT(batch->placeholder_rows, ElementsAre(2));
  EXPECT_THAT(batch->mask_offsets, ElementsAre(-1, 0));
  EXPECT_THAT(batch->pending_mask_rows, ElementsAre(1));
  v1::StepMasks masks;
  masks.set_step_id(8);
  v1::RowTokenMask* row = masks.add_rows();
  row->set_seq_id(2);
  const uint32_t allowed = 0x28;  // Tokens 3 and 5.
  row->set_token_mask(std::string(reinterpret_cast<const char*>(&allowed), sizeof(allowed)));
  ASSERT_TRUE(ApplyStepMasks(plan, masks, limits.vocab_size, &*batch).ok());
  EXPECT_THAT(batch->token_masks, ElementsAre(0x28u));
}

TEST(FlattenStepPlanTest, RefusesPlaceholdersOutsideAPlainDecodeRowByItsSeqId) {
  const LastSampledTokens last = SampledInStep7();
  const BatchLimits limits{.vocab_size = 10,
                           .block_size = 4,
                           .num_gpu_blocks = 10,
                           .num_cpu_blocks = 0,
                           .last_sampled = &last};
  using Edit = void (*)(SequenceStep*);
  const std::vector<std::pair<Edit, const char*>> refused = {
      {[](SequenceStep* s) { s->add_token_ids(3); }, "decode row of one token"},
      {[](SequenceStep* s) { s->set_start_position(0); }, "decode row of one token"},
      {[](SequenceStep* s) { s->set_do_sample(false); }, "decode row of one token"},
      {[](SequenceStep* s) { s->add_draft_token_ids(3); }, "draft_token_ids"},
      {[](SequenceStep* s) { s->mutable_sampling()->set_token_mask(std::string(4, '\xff')); },
       "token mask"},
      {[](SequenceStep* s) { s->mutable_sampling()->set_processed_logprobs(true); },
       "beam search"},
      {[](SequenceStep* s) { s->set_seq_id(3); }, "previous step"},  // Had drafts.
      {[](SequenceStep* s) { s->set_seq_id(4); }, "previous step"},  // Never sampled.
  };
  for (const auto& [edit, problem] : refused) {
    StepPlan plan;
    plan.set_step_id(8);
    SequenceStep* step = AddStep(plan, 1, {0}, 5, {0, 1}, true);
    step->set_input_from_last_sample(true);
    edit(step);
    auto batch = FlattenStepPlan(plan, limits);
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument) << problem;
    EXPECT_THAT(std::string(batch.status().message()), ::testing::HasSubstr(problem));
    EXPECT_THAT(std::string(batch.status().message()),
                ::testing::StartsWith(absl::StrCat("seq_id ", step->seq_id(), ":")));
  }
  // A plan of another step than the next one (plans run out of order): the
  // record is step 7's, so only step 8 may refer to it.
  StepPlan plan;
  AddStep(plan, 1, {0}, 5, {0, 1}, true)->set_input_from_last_sample(true);
  for (int64_t step_id : {6, 7, 9}) {
    plan.set_step_id(step_id);
    auto batch = FlattenStepPlan(plan, limits);
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(batch.status().message(),
              absl::StrCat("seq_id 1: input_from_last_sample refers to step ", step_id - 1,
                           ", but this worker's previous step is 7"));
  }
  // Without a record (a runner that keeps none) every placeholder is refused.
  plan.set_step_id(8);
  BatchLimits no_record = limits;
  no_record.last_sampled = nullptr;
  EXPECT_EQ(FlattenStepPlan(plan, no_record).status().message(),
            "seq_id 1: input_from_last_sample refers to step 7, but this worker's previous step "
            "is none");
}

}  // namespace
}  // namespace pagoda::worker

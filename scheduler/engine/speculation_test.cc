// Speculative decoding's engine-side bookkeeping with the real scheduler,
// block manager and output processor (the worker's answer written by hand):
// drafts proposed and reserved, accepted ones appended with the stop checks
// inside the run, the rejected drafts' slots given back, the prefix cache
// never holding a block with an unverified token, and a constrained
// sequence's drafts cut to its grammar with a mask per verified position.
#include "scheduler/engine/speculation.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "scheduler/constraints/compiled_grammar.h"
#include "scheduler/constraints/regex.h"
#include "scheduler/engine/constraint_mask.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/step_plan.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

constexpr int32_t kEos = 2;
constexpr int kBlockSize = 4;

SpeculativeConfig NgramConfig(int k) {
  SpeculativeConfig config;
  config.method = SpeculativeMethod::kNgram;
  config.num_speculative_tokens = k;
  config.prompt_lookup_min = 1;
  config.prompt_lookup_max = 3;
  return config;
}

SchedulerConfig SmallConfig() {
  SchedulerConfig config;
  config.block_size = kBlockSize;
  config.num_gpu_blocks = 16;
  config.max_model_len = 64;
  config.max_num_batched_tokens = 64;
  config.enable_prefix_caching = true;
  return config;
}

class SpeculationTest : public ::testing::Test {
 protected:
  SpeculationTest()
      : scheduler_(SmallConfig()),
        processor_({kEos}, 64, &scheduler_),
        speculator_(NgramConfig(3), 64, 64) {}

  // A request whose prompt repeats 10 11 12 13, so prompt lookup proposes
  // the continuation of the cycle.
  SequenceGroup* Add(int max_tokens, int min_tokens = 0, std::vector<int32_t> stop_ids = {},
                     SamplingOptions sampling = {}) {
    StoppingOptions stopping;
    stopping.max_tokens = max_tokens;
    stopping.min_tokens = min_tokens;
    stopping.stop_token_ids = std::move(stop_ids);
    auto group = std::make_unique<SequenceGroup>(
        "r", std::vector<int32_t>{10, 11, 12, 13, 10, 11, 12, 13, 10}, 1, std::move(sampling),
        stopping, absl::FromUnixSeconds(1));
    SequenceGroup* raw = group.get();
    scheduler_.AddSequenceGroup(std::move(group));
    return raw;
  }

  // One step; the worker's answer gives `accepted` of the drafts sent (as
  // accepted) and then `token`.
  // `next`: the worker's proposals for the next step, on a row that asks
  // for them (num_next_draft_proposals), as many as it asks.
  std::vector<RequestDelta> Step(int accepted, int32_t token, SchedulerOutput* out = nullptr,
                                 const std::vector<int32_t>& next = {}) {
    speculator_.Propose(scheduler_);
    SchedulerOutput output = scheduler_.Schedule();
    speculator_.TakeScheduled(output);
    wv1::StepPlan plan = BuildStepPlan(step_id_++, output, scheduler_.block_manager(), {kEos});
    speculator_.AttachDrafts(output, plan);
    plan_ = plan;
    wv1::StepResult result;
    for (const wv1::SequenceStep& step : plan.sequences()) {
      wv1::SampledToken* sampled = result.add_tokens();
      sampled->set_seq_id(step.seq_id());
      sampled->set_token_id(token);
      // draft_model: the worker's own proposals, 30, 31, ...
      const int sent = step.draft_token_ids_size() + step.num_draft_proposals();
      for (int j = 0; j < accepted && j < sent; ++j) {
        sampled->add_accepted_draft_ids(j < step.draft_token_ids_size() ? step.draft_token_ids(j)
                                                                        : 30 + j);
        sampled->add_accepted_draft_logprobs(-0.25f);
      }
      for (int j = 0; j < step.num_next_draft_proposals() && j < static_cast<int>(next.size());
           ++j) {
        sampled->add_next_draft_ids(next[j]);
      }
    }
    absl::StatusOr<std::vector<GeneratedToken>> sampled = ExtractSampledTokens(result, output);
    EXPECT_TRUE(sampled.ok()) << sampled.status();
    absl::StatusOr<std::vector<std::vector<GeneratedToken>>> drafts =
        speculator_.ExtractAccepted(result, output);
    EXPECT_TRUE(drafts.ok()) << drafts.status();
    std::vector<RequestDelta> deltas = processor_.Process(output, *sampled, &*drafts);
    scheduler_.CommitComputedBlocks(output);
    speculator_.ReleaseRejectedSlots(output, scheduler_.block_manager());
    if (out != nullptr) *out = std::move(output);
    return deltas;
  }

  static std::vector<int32_t> Ids(absl::Span<const GeneratedToken> tokens) {
    std::vector<int32_t> ids;
    for (const GeneratedToken& token : tokens) ids.push_back(token.token_id);
    return ids;
  }

  Scheduler scheduler_;
  OutputProcessor processor_;
  Speculator speculator_;
  wv1::StepPlan plan_;
  int64_t step_id_ = 0;
};

// The grammar `pattern` over ids 10 "a", 11 "b", 12 "c", 13 "-", 14 "1" and
// 15 "c-" (ids below 10 are special: EOS among them).
std::shared_ptr<const constraints::CompiledGrammar> GrammarOverCycleTokens(
    const std::string& pattern) {
  std::vector<std::optional<std::string>> bytes(10, std::nullopt);
  for (const char* piece : {"a", "b", "c", "-", "1", "c-"}) bytes.push_back(piece);
  constraints::GrammarBuilder g;
  const constraints::RuleId root = g.NewRule("root");
  g.SetBody(root, *constraints::CompileRegex(pattern, g));
  return *constraints::CompiledGrammar::Create(
      g, *constraints::TokenVocabulary::Create(std::move(bytes), 16));
}

// A constrained sequence proposes only the drafts its grammar accepts, and
// the plan's masks follow them: the mask of verified position i equals the
// one plain decoding computes once the first i drafts were output, token by
// token, through the sequence's own matcher. The sequence's matcher itself
// reads no draft.
TEST_F(SpeculationTest, ConstrainedDraftsStopAtTheGrammarAndEachPositionGetsItsMask) {
  SamplingOptions sampling;
  sampling.grammar = GrammarOverCycleTokens("abc1*");
  SequenceGroup* group = Add(/*max_tokens=*/32, 0, {}, sampling);
  Step(0, 10);  // Prefill: the output is "a".
  speculator_.Propose(scheduler_);
  SchedulerOutput output = scheduler_.Schedule();
  speculator_.TakeScheduled(output);
  wv1::StepPlan plan = BuildStepPlan(step_id_++, output, scheduler_.block_manager(), {kEos});
  speculator_.AttachDrafts(output, plan);
  // Lookup proposes 11 12 13 ("b", "c", "-"); the grammar refuses "-".
  ASSERT_EQ(plan.sequences_size(), 1);
  const wv1::SequenceStep& step = plan.sequences(0);
  ASSERT_EQ(std::vector<int32_t>(step.draft_token_ids().begin(), step.draft_token_ids().end()),
            std::vector<int32_t>({11, 12}));
  EXPECT_EQ(output.scheduled[0].num_lookahead_slots, 2);
  EXPECT_TRUE(step.token_mask_follows());

  const wv1::StepMasks masks = BuildStepMasks(plan, output, {kEos});
  ASSERT_EQ(masks.rows_size(), 3);
  EXPECT_EQ(group->seqs()[0]->constraint_state().tokens_read, 1);
  // Plain decoding's masks: a twin sequence given the drafts one by one.
  SequenceGroup twin("twin", {10}, 99, sampling, group->stopping(), absl::FromUnixSeconds(1));
  Sequence& twin_seq = *twin.seqs()[0];
  twin_seq.AppendToken(GeneratedToken{10, 0.0f, {}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(masks.rows(i).seq_id(), step.seq_id());
    EXPECT_EQ(masks.rows(i).token_mask(), NextTokenMask(twin, twin_seq, {kEos}, {}))
        << "position " << i;
    if (i < 2) twin_seq.AppendToken(GeneratedToken{step.draft_token_ids(i), 0.0f, {}});
  }
  // Each position's mask differs ("b", then "c" or "c-", then "1" or EOS),
  // so one applied at another position would be caught.
  EXPECT_NE(masks.rows(0).token_mask(), masks.rows(1).token_mask());
  EXPECT_NE(masks.rows(1).token_mask(), masks.rows(2).token_mask());

  // A draft the grammar refuses after all repeats the mask that refused it.
  std::vector<std::string> after_refusal =
      NextTokenMasks(*group, *group->seqs()[0], std::vector<int32_t>{13, 11}, {kEos}, {});
  ASSERT_EQ(after_refusal.size(), 3u);
  EXPECT_EQ(after_refusal[1], after_refusal[0]);
  EXPECT_EQ(after_refusal[2], after_refusal[0]);
}

// A grammar that waits for its token (a reasoning model's </think>, here
// "-") lets every token but the bans come until the output holds it, then
// binds what follows as if the output started there; drafts and their
// per-position masks follow the same rule.
TEST_F(SpeculationTest, AGrammarThatWaitsForItsTokenBindsOnlyAfterIt) {
  SamplingOptions plain;
  plain.grammar = GrammarOverCycleTokens("abc1*");
  SamplingOptions waiting = plain;
  waiting.grammar_after_token = 13;
  SequenceGroup group("g", {10}, 1, waiting, StoppingOptions{}, absl::FromUnixSeconds(1));
  SequenceGroup fresh("f", {10}, 2, plain, StoppingOptions{}, absl::FromUnixSeconds(1));
  Sequence& seq = *group.seqs()[0];
  Sequence& twin = *fresh.seqs()[0];
  const std::string all("\xff\xff\0\0", 4);  // The vocabulary's 16 tokens.
  std::string all_but_eos = all;
  all_but_eos[0] = static_cast<char>(0xff & ~(1 << kEos));
  EXPECT_EQ(NextTokenMask(group, seq, {kEos}, {kEos}), all_but_eos);
  const std::string first = NextTokenMask(fresh, twin, {kEos}, {});
  SequenceGroup after_a("a", {10}, 3, plain, StoppingOptions{}, absl::FromUnixSeconds(1));
  after_a.seqs()[0]->AppendToken(GeneratedToken{10, 0, {}});
  const std::string second = NextTokenMask(after_a, *after_a.seqs()[0], {kEos}, {});
  EXPECT_EQ(NextTokenMasks(group, seq, std::vector<int32_t>{11, 13, 10}, {kEos}, {}),
            std::vector<std::string>({all, all, first, second}));
  // "b" and "-" pass while it waits, "a" is the grammar's, a second "-" is not.
  EXPECT_EQ(GrammarValidDrafts(group, seq, {kEos}, std::vector<int32_t>{11, 13, 10, 13}), 3);
  seq.AppendToken(GeneratedToken{11, 0, {}});  // "b": still free.
  EXPECT_EQ(NextTokenMask(group, seq, {kEos}, {}), all);
  seq.AppendToken(GeneratedToken{13, 0, {}});  // The token: the grammar starts.
  EXPECT_EQ(NextTokenMask(group, seq, {kEos}, {}), first);
  seq.AppendToken(GeneratedToken{10, 0, {}});
  EXPECT_EQ(NextTokenMask(group, seq, {kEos}, {}), second);
  EXPECT_FALSE(seq.constraint_state().refused);
}

// A draft model of 16 positions (k = 3): a row drafts while its three
// proposals after `length` tokens stay below position 16 (length 13 the
// last), then verifies none, while a shorter row in the same step still
// drafts its three.
TEST_F(SpeculationTest, ADraftModelsPositionsStopEachRowsDraftsAlone) {
  SpeculativeConfig config;
  config.method = SpeculativeMethod::kDraftModel;
  config.model = "/draft";
  config.num_speculative_tokens = 3;
  config.draft_max_len = 16;
  speculator_ = Speculator(config, 64, 64, {kEos});
  auto proposals_of = [&](const SequenceGroup* group) {
    for (const wv1::SequenceStep& step : plan_.sequences()) {
      if (step.seq_id() == group->seqs()[0]->seq_id()) return step.num_draft_proposals();
    }
    return -1;
  };
  const SequenceGroup* first = Add(/*max_tokens=*/32);
  Step(0, 10);  // Prefill: length 10.
  Step(2, 11);  // Length 10 drafts, 2 accepted and a token: 13.
  EXPECT_EQ(proposals_of(first), 3);
  Step(0, 12);  // Length 13 still drafts (positions up to 15): 14.
  EXPECT_EQ(proposals_of(first), 3);
  StoppingOptions stopping;
  stopping.max_tokens = 32;
  auto owned = std::make_unique<SequenceGroup>(
      "r2", std::vector<int32_t>{10, 11, 12, 13, 10, 11, 12, 13, 10}, /*first_seq_id=*/2,
      SamplingOptions(), stopping, absl::FromUnixSeconds(2));
  const SequenceGroup* second = owned.get();
  scheduler_.AddSequenceGroup(std::move(owned));
  Step(0, 13);  // The second's prefill (alone: prompts are not mixed with decodes here).
  EXPECT_EQ(proposals_of(second), 0);
  Step(0, 13);  // The first at 14: none; the second at 10: three.
  EXPECT_EQ(proposals_of(first), 0);
  EXPECT_EQ(proposals_of(second), 3);
  EXPECT_EQ(first->seqs()[0]->length(), 15);
  EXPECT_EQ(plan_.sequences_size(), 2);
}

// vLLM's num_speculative_tokens_per_batch_size: each step's rows carry the
// k of the step's running sequences (3 alone, 1 with two running), and a
// constrained row asks for that many proposals after its step.
TEST_F(SpeculationTest, BatchSizeScheduleSetsEachStepsDrafts) {
  SpeculativeConfig config;
  config.method = SpeculativeMethod::kDraftModel;
  config.model = "/draft";
  config.num_speculative_tokens = 3;
  config.per_batch_size = {{1, 1, 3}, {2, 8, 1}};
  speculator_ = Speculator(config, 64, 64, {kEos});
  const SequenceGroup* first = Add(/*max_tokens=*/32);
  Step(0, 10);  // Prefill.
  Step(0, 11);  // Alone: k 3.
  ASSERT_EQ(plan_.sequences_size(), 1);
  EXPECT_EQ(plan_.sequences(0).num_draft_proposals(), 3);
  SamplingOptions sampling;
  sampling.grammar = GrammarOverCycleTokens("(abc-)*");
  StoppingOptions stopping;
  stopping.max_tokens = 32;
  scheduler_.AddSequenceGroup(std::make_unique<SequenceGroup>(
      "r2", std::vector<int32_t>{10, 11, 12, 13, 10, 11, 12, 13, 10}, /*first_seq_id=*/2,
      sampling, stopping, absl::FromUnixSeconds(2)));
  Step(0, 11);  // The second's prefill (prompts are not mixed with decodes here).
  Step(0, 12);  // Two running: k 1 each.
  ASSERT_EQ(plan_.sequences_size(), 2);
  for (const wv1::SequenceStep& step : plan_.sequences()) {
    if (step.seq_id() == first->seqs()[0]->seq_id()) {
      EXPECT_EQ(step.num_draft_proposals(), 1);
    } else {
      EXPECT_EQ(step.num_next_draft_proposals(), 1);  // The constrained row's, for its next step.
    }
  }
}

// Under a draft model a constrained row proposes a step ahead: it asks the
// worker for proposals after its step (num_next_draft_proposals, their room
// in its lookahead slots), and sends the next step those its grammar
// accepts as drafts, each position with its mask. Proposals made for
// another length of the sequence are not used.
TEST_F(SpeculationTest, ConstrainedRowsVerifyTheDraftModelsProposalsOfTheStepBefore) {
  SpeculativeConfig config;
  config.method = SpeculativeMethod::kDraftModel;
  config.model = "/draft";
  config.num_speculative_tokens = 3;
  speculator_ = Speculator(config, 64, 64, {kEos});
  SamplingOptions sampling;
  sampling.grammar = GrammarOverCycleTokens("abc1*");
  SequenceGroup* group = Add(/*max_tokens=*/32, 0, {}, sampling);
  Step(0, 10);  // Prefill: "a".
  SchedulerOutput output;
  // The first decode has nothing to verify yet, and asks for 3 proposals.
  Step(0, 11, &output, {12, 13, 14});  // "b"; then "c", "-", "1" proposed.
  ASSERT_EQ(plan_.sequences_size(), 1);
  EXPECT_EQ(plan_.sequences(0).num_draft_proposals(), 0);
  EXPECT_EQ(plan_.sequences(0).draft_token_ids_size(), 0);
  EXPECT_EQ(plan_.sequences(0).num_next_draft_proposals(), 3);
  EXPECT_EQ(output.scheduled[0].num_lookahead_slots, 3);
  // "-" cannot follow "abc": one draft, with a mask per position, and room
  // for the next proposals past it.
  Step(1, 14, &output, {14, 14, 2});  // "c" accepted, then "1".
  const wv1::SequenceStep& step = plan_.sequences(0);
  EXPECT_EQ(std::vector<int32_t>(step.draft_token_ids().begin(), step.draft_token_ids().end()),
            std::vector<int32_t>({12}));
  EXPECT_TRUE(step.token_mask_follows());
  EXPECT_EQ(step.num_next_draft_proposals(), 3);
  EXPECT_EQ(output.scheduled[0].num_lookahead_slots, 4);
  EXPECT_EQ(Ids(group->seqs()[0]->output()), (std::vector<int32_t>{10, 11, 12, 14}));
  EXPECT_EQ(speculator_.totals().num_draft_tokens, 1);
  EXPECT_EQ(speculator_.totals().num_accepted_tokens, 1);
  // The drafts stop before EOS (after which no mask is needed).
  Step(0, 14);
  EXPECT_EQ(std::vector<int32_t>(plan_.sequences(0).draft_token_ids().begin(),
                                 plan_.sequences(0).draft_token_ids().end()),
            std::vector<int32_t>({14, 14}));
  // That answer returned no proposals: the next step verifies none.
  Step(0, 14);
  EXPECT_EQ(plan_.sequences(0).draft_token_ids_size(), 0);
  EXPECT_EQ(plan_.sequences(0).num_next_draft_proposals(), 3);

  // More proposals than asked for: the answer is refused.
  speculator_.Propose(scheduler_);
  output = scheduler_.Schedule();
  speculator_.TakeScheduled(output);
  wv1::StepPlan plan = BuildStepPlan(step_id_++, output, scheduler_.block_manager(), {kEos});
  speculator_.AttachDrafts(output, plan);
  wv1::StepResult result;
  wv1::SampledToken* sampled = result.add_tokens();
  sampled->set_seq_id(plan.sequences(0).seq_id());
  sampled->set_token_id(14);
  for (int j = 0; j < 4; ++j) sampled->add_next_draft_ids(14);
  EXPECT_EQ(speculator_.ExtractAccepted(result, output).status().code(),
            absl::StatusCode::kInternal);
}

// Under a draft model of `positions` positions (k = 3), the proposals a
// constrained row asks for after its first decode (at length 10, no drafts
// yet): they are the next step's, made at length 11 once the step's token
// is appended, so 3 of them need 11 + 3 = 14 positions, or none are asked.
int AskedAheadAtTheFirstDecode(Scheduler& scheduler, OutputProcessor& processor, int positions) {
  SpeculativeConfig config;
  config.method = SpeculativeMethod::kDraftModel;
  config.model = "/draft";
  config.num_speculative_tokens = 3;
  config.draft_max_len = positions;
  Speculator speculator(config, 64, 64, {kEos});
  SamplingOptions sampling;
  sampling.grammar = GrammarOverCycleTokens("abc1*");
  StoppingOptions stopping;
  stopping.max_tokens = 32;
  scheduler.AddSequenceGroup(
      std::make_unique<SequenceGroup>("r", std::vector<int32_t>{10, 11, 12, 13, 10, 11, 12, 13, 10},
                                      1, sampling, stopping, absl::FromUnixSeconds(1)));
  for (int step_id = 0; step_id < 2; ++step_id) {
    speculator.Propose(scheduler);
    SchedulerOutput output = scheduler.Schedule();
    speculator.TakeScheduled(output);
    wv1::StepPlan plan = BuildStepPlan(step_id, output, scheduler.block_manager(), {kEos});
    speculator.AttachDrafts(output, plan);
    if (step_id == 1) return plan.sequences(0).num_next_draft_proposals();
    wv1::StepResult result;  // The prefill's token: "a".
    result.add_tokens()->set_seq_id(plan.sequences(0).seq_id());
    result.mutable_tokens(0)->set_token_id(10);
    absl::StatusOr<std::vector<GeneratedToken>> sampled = ExtractSampledTokens(result, output);
    absl::StatusOr<std::vector<std::vector<GeneratedToken>>> drafts =
        speculator.ExtractAccepted(result, output);
    EXPECT_TRUE(sampled.ok() && drafts.ok());
    processor.Process(output, *sampled, &*drafts);
    scheduler.CommitComputedBlocks(output);
  }
  return -1;
}

TEST_F(SpeculationTest, ConstrainedRowsAskForProposalsAheadThatFitTheDraftsPositions) {
  EXPECT_EQ(AskedAheadAtTheFirstDecode(scheduler_, processor_, 14), 3);
}

TEST_F(SpeculationTest, ConstrainedRowsAskForNoProposalsAheadPastTheDraftsPositions) {
  EXPECT_EQ(AskedAheadAtTheFirstDecode(scheduler_, processor_, 13), 0);
}

TEST_F(SpeculationTest, ReservesDraftSlotsAndGivesBackThoseOfRejectedDrafts) {
  SequenceGroup* group = Add(/*max_tokens=*/32);
  Step(0, 11);  // Prefill: no drafts; the output is now ... 10 11.
  Sequence& seq = *group->seqs()[0];
  ASSERT_EQ(seq.length(), 10);
  const int free_before = scheduler_.block_manager().num_free_gpu_blocks();

  SchedulerOutput output;
  std::vector<RequestDelta> deltas = Step(/*accepted=*/1, /*token=*/40, &output);
  // Lookup of "10 11" proposes 12 13 10; the plan carries them and the
  // entry reserved 1 + 3 slots from position 9: positions up to 12.
  ASSERT_EQ(plan_.sequences_size(), 1);
  EXPECT_EQ(std::vector<int32_t>(plan_.sequences(0).draft_token_ids().begin(),
                                 plan_.sequences(0).draft_token_ids().end()),
            std::vector<int32_t>({12, 13, 10}));
  EXPECT_EQ(output.scheduled[0].num_lookahead_slots, 3);
  EXPECT_EQ(seq.num_lookahead_slots(), 0) << "reserved for one step only";
  // One draft accepted, then the worker's own token.
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(Ids(deltas[0].seqs[0].new_tokens), std::vector<int32_t>({12, 40}));
  EXPECT_EQ(seq.length(), 12);
  EXPECT_EQ(seq.num_computed_tokens(), 11) << "the accepted draft's K/V counts";
  // The table was grown to 13 slots (4 blocks) and shrinks back to the 12
  // tokens' 3 blocks: one block back, none lost.
  EXPECT_EQ(scheduler_.block_manager().GetBlockTable(seq.seq_id()).size(), 3u);
  EXPECT_EQ(scheduler_.block_manager().num_free_gpu_blocks(), free_before);
  // Counted as vLLM counts: one draft of 3 tokens, 1 accepted at position 0.
  EXPECT_EQ(speculator_.totals().num_drafts, 1);
  EXPECT_EQ(speculator_.totals().num_draft_tokens, 3);
  EXPECT_EQ(speculator_.totals().num_accepted_tokens, 1);
  EXPECT_EQ(speculator_.totals().accepted_per_pos, std::vector<int64_t>({1, 0, 0}));
}

TEST_F(SpeculationTest, PrefixCacheHoldsOnlyBlocksOfVerifiedTokens) {
  SequenceGroup* group = Add(/*max_tokens=*/32);
  Step(0, 11);
  // Every draft rejected: positions 10..12 hold rejected drafts' K/V, in
  // the block of positions 8..11 and the one after.
  Step(/*accepted=*/0, /*token=*/50);
  const Sequence& seq = *group->seqs()[0];
  ASSERT_EQ(seq.length(), 11);
  EXPECT_EQ(seq.num_computed_tokens(), 10);
  const BlockTable* table = scheduler_.block_manager().FindBlockTable(seq.seq_id());
  ASSERT_NE(table, nullptr);
  // Two full blocks of verified tokens (0..7) are cached; the third holds
  // verified 8, 9 and 10 (not computed yet) and a rejected draft's slot.
  EXPECT_EQ(table->hashes.size(), 2u);
  EXPECT_EQ(table->blocks.size(), 3u);
  EXPECT_FALSE(scheduler_.block_manager().gpu_pool().hash(table->blocks[2]).has_value());
  EXPECT_EQ(scheduler_.block_manager().CachedBlockHashes().size(), 2u);
}

TEST_F(SpeculationTest, StopTokenInsideAnAcceptedRunEndsItThere) {
  SequenceGroup* group = Add(/*max_tokens=*/32, /*min_tokens=*/0, /*stop_ids=*/{13});
  Step(0, 11);
  Sequence& seq = *group->seqs()[0];
  // Drafts 12 13 10, all accepted, then EOS: the run ends at the stop id 13
  // inside it, and nothing after it is appended or streamed.
  std::vector<RequestDelta> deltas = Step(/*accepted=*/3, /*token=*/kEos);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(Ids(deltas[0].seqs[0].new_tokens), std::vector<int32_t>({12, 13}));
  EXPECT_EQ(deltas[0].seqs[0].status, SequenceStatus::kFinishedStopped);
  EXPECT_EQ(Ids(seq.output()), std::vector<int32_t>({11, 12, 13}));
  EXPECT_EQ(scheduler_.FreeFinished().size(), 1u);
}

TEST_F(SpeculationTest, MaxTokensBoundsTheDraftsAndTheRun) {
  SequenceGroup* group = Add(/*max_tokens=*/3);
  Step(0, 11);
  // One output token so far, two left: at most one draft, then one token.
  std::vector<RequestDelta> deltas = Step(/*accepted=*/1, /*token=*/60);
  EXPECT_EQ(plan_.sequences(0).draft_token_ids_size(), 1);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(Ids(deltas[0].seqs[0].new_tokens), std::vector<int32_t>({12, 60}));
  EXPECT_EQ(deltas[0].seqs[0].status, SequenceStatus::kFinishedLength);
  EXPECT_EQ(group->seqs()[0]->num_output_tokens(), 3);
}

TEST_F(SpeculationTest, NoDraftsBeforeMinTokensWouldBeBannedPerRow) {
  Add(/*max_tokens=*/32, /*min_tokens=*/3);
  Step(0, 11);
  // One output token, min_tokens 3: one draft at most (the row after it is
  // the third token, where EOS is allowed again).
  Step(/*accepted=*/0, /*token=*/70);
  EXPECT_EQ(plan_.sequences(0).draft_token_ids_size(), 1);
}

TEST_F(SpeculationTest, AnAnswerThatDoesNotFitTheDraftsIsRefused) {
  Add(/*max_tokens=*/32);
  Step(0, 11);
  speculator_.Propose(scheduler_);
  SchedulerOutput output = scheduler_.Schedule();
  speculator_.TakeScheduled(output);
  wv1::StepResult result;
  wv1::SampledToken* sampled = result.add_tokens();
  sampled->set_seq_id(output.scheduled[0].seq->seq_id());
  sampled->add_accepted_draft_ids(99);  // Not the draft sent (12).
  sampled->add_accepted_draft_logprobs(-1);
  EXPECT_EQ(speculator_.ExtractAccepted(result, output).status().code(),
            absl::StatusCode::kInternal);
  sampled->set_accepted_draft_ids(0, 12);
  sampled->add_accepted_draft_logprobs(-1);  // Two logprobs for one draft.
  EXPECT_EQ(speculator_.ExtractAccepted(result, output).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(speculator_.totals().num_drafts, 0) << "nothing counted from a refused answer";
}

TEST_F(SpeculationTest, ParallelSamplesSpeculateOnTheirOwnTokensAndLeakNoBlock) {
  SamplingOptions sampling;
  sampling.n = 2;
  sampling.best_of = 2;
  sampling.temperature = 0.8f;
  SequenceGroup* group = Add(/*max_tokens=*/8, 0, {}, sampling);
  Step(0, 11);  // The first token forks the second sample off the prompt.
  ASSERT_EQ(group->seqs().size(), 2u);
  // The parent decodes with drafts; the child draws its first token (from
  // the shared prompt blocks, copied on write) without any.
  Step(/*accepted=*/2, /*token=*/40);
  ASSERT_EQ(plan_.sequences_size(), 2);
  EXPECT_EQ(plan_.sequences(0).draft_token_ids_size(), 3);
  EXPECT_EQ(plan_.sequences(1).draft_token_ids_size(), 0);
  const Sequence& parent = *group->seqs()[0];
  const Sequence& child = *group->seqs()[1];
  EXPECT_EQ(Ids(parent.output()), std::vector<int32_t>({11, 12, 13, 40}));
  EXPECT_EQ(Ids(child.output()), std::vector<int32_t>({40}));
  EXPECT_NE(scheduler_.block_manager().GetBlockTable(parent.seq_id()).back(),
            scheduler_.block_manager().GetBlockTable(child.seq_id()).back());
  // To the end: every block comes back (cached ones as evictable).
  for (int step = 0; step < 8 && !group->IsFinished(); ++step) Step(/*accepted=*/1, 40);
  ASSERT_TRUE(group->IsFinished());
  EXPECT_EQ(scheduler_.FreeFinished().size(), 1u);
  EXPECT_EQ(scheduler_.block_manager().num_free_gpu_blocks(), SmallConfig().num_gpu_blocks);
}

TEST_F(SpeculationTest, AcceptedDraftsCarryTheirLogprobsAndTopLogprobsPerPosition) {
  Add(/*max_tokens=*/32);
  Step(0, 11);
  speculator_.Propose(scheduler_);
  SchedulerOutput output = scheduler_.Schedule();
  speculator_.TakeScheduled(output);
  wv1::StepResult result;
  wv1::SampledToken* sampled = result.add_tokens();
  sampled->set_seq_id(output.scheduled[0].seq->seq_id());
  sampled->set_token_id(70);
  for (int t = 0; t < 2; ++t) sampled->add_top();  // Two top logprobs per position.
  for (int j = 0; j < 2; ++j) {                    // Drafts 12 and 13 accepted.
    sampled->add_accepted_draft_ids(12 + j);
    sampled->add_accepted_draft_logprobs(-0.5f * (j + 1));
    for (int t = 0; t < 2; ++t) {
      wv1::TokenLogprob* top = sampled->add_accepted_draft_top();
      top->set_token_id(100 * j + t);
      top->set_logprob(-1.0f * t);
    }
  }
  absl::StatusOr<std::vector<std::vector<GeneratedToken>>> accepted =
      speculator_.ExtractAccepted(result, output);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ASSERT_EQ(accepted->size(), 1u);
  const std::vector<GeneratedToken>& run = (*accepted)[0];
  ASSERT_EQ(run.size(), 2u);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(run[j].token_id, 12 + j);
    EXPECT_FLOAT_EQ(run[j].logprob, -0.5f * (j + 1));
    ASSERT_EQ(run[j].top.size(), 2u);
    EXPECT_EQ(run[j].top[1].token_id, 100 * j + 1);
    EXPECT_FLOAT_EQ(run[j].top[1].logprob, -1.0f);
  }
  EXPECT_EQ(speculator_.totals().accepted_per_pos, std::vector<int64_t>({1, 1, 0}));
}

// draft_model: the server asks the worker for k proposals (it sends no
// drafts), reserves their slots, takes the accepted ids from the answer and
// counts them as for ngram; an answer with more than it asked for, or a
// negative id, is refused.
TEST_F(SpeculationTest, DraftModelAsksTheWorkerToProposeAndCountsItsDrafts) {
  SpeculativeConfig config;
  config.method = SpeculativeMethod::kDraftModel;
  config.model = "/draft";
  config.num_speculative_tokens = 3;
  speculator_ = Speculator(config, 64, 64);
  SequenceGroup* group = Add(/*max_tokens=*/32);
  Step(0, 11);
  const int free_before = scheduler_.block_manager().num_free_gpu_blocks();
  SchedulerOutput output;
  std::vector<RequestDelta> deltas = Step(/*accepted=*/2, /*token=*/40, &output);
  ASSERT_EQ(plan_.sequences_size(), 1);
  EXPECT_EQ(plan_.sequences(0).num_draft_proposals(), 3);
  EXPECT_TRUE(plan_.sequences(0).draft_token_ids().empty());
  EXPECT_EQ(output.scheduled[0].num_lookahead_slots, 3);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(Ids(deltas[0].seqs[0].new_tokens), std::vector<int32_t>({30, 31, 40}));
  const Sequence& seq = *group->seqs()[0];
  EXPECT_EQ(seq.length(), 13);
  // 13 slots reserved, 13 tokens kept: one more block than before, no leak.
  EXPECT_EQ(scheduler_.block_manager().GetBlockTable(seq.seq_id()).size(), 4u);
  EXPECT_EQ(scheduler_.block_manager().num_free_gpu_blocks(), free_before - 1);
  EXPECT_EQ(speculator_.totals().num_drafts, 1);
  EXPECT_EQ(speculator_.totals().num_draft_tokens, 3);
  EXPECT_EQ(speculator_.totals().num_accepted_tokens, 2);
  EXPECT_EQ(speculator_.totals().accepted_per_pos, std::vector<int64_t>({1, 1, 0}));

  speculator_.Propose(scheduler_);
  output = scheduler_.Schedule();
  speculator_.TakeScheduled(output);
  wv1::StepResult result;
  wv1::SampledToken* sampled = result.add_tokens();
  sampled->set_seq_id(seq.seq_id());
  for (int32_t id : {5, 6, 7, 8}) {  // Four for the three asked.
    sampled->add_accepted_draft_ids(id);
    sampled->add_accepted_draft_logprobs(-1);
  }
  EXPECT_EQ(speculator_.ExtractAccepted(result, output).status().code(),
            absl::StatusCode::kInternal);
  sampled->mutable_accepted_draft_ids()->Truncate(1);
  sampled->mutable_accepted_draft_logprobs()->Truncate(1);
  sampled->set_accepted_draft_ids(0, -3);
  EXPECT_EQ(speculator_.ExtractAccepted(result, output).status().code(),
            absl::StatusCode::kInternal);
  sampled->set_accepted_draft_ids(0, 9);
  EXPECT_TRUE(speculator_.ExtractAccepted(result, output).ok());
}

}  // namespace
}  // namespace pagoda::scheduler

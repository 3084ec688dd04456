// A draft model sharded over a two-rank group (draft_tensor_parallel_size
// equal to the world size, vLLM's default): two CPU runners in one process
// form a real group (TCP collectives through a rendezvous store), each loads
// its shard of the draft beside its shard of the target, and both run every
// draft pass; rank 0 picks each draft and the other rank receives it before
// the next pass feeds it. With the target as its own draft, split the same
// way, the draft's sums are the target's: every draft is accepted, greedy
// or drawn (a draft is drawn with its target row's noise), and the tokens
// equal plain decoding's, greedy and seeded, with penalties too. A draft whole on
// rank 0 (size 1) leaves rank 1 without a draft cache; the worker refuses
// sizes that are neither.

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/runner_test_group.h"
#include "tests/support/runner_test_model.h"
#include "worker/model_runner.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::LoadModelRequest;
using pagoda::worker::v1::SampledToken;
using pagoda::worker::v1::SamplingOptions;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 6;  // 24 slots: the prompt, 12 new tokens, drafts past them.
constexpr int kSeqs = 2;
constexpr int kVocab = 40;
constexpr int kNewTokens = 12;
constexpr int kDrafts = 3;
const std::vector<int> kPrompt = {3, 9, 4, 17, 22};

struct Generated {
  std::vector<int> tokens;
  int proposed = 0;
  int accepted = 0;
};

class DraftTensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeRunnerTestModel("pagoda_draft_tp", kVocab, /*seed=*/23);
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Both ranks of a fresh group with the target as its own draft at
  // `draft_size` (-1: no draft).
  TwoRankCpuGroup::Loaded LoadGroup(const std::string& prefix, int draft_size) {
    const std::string model = dir_ + "/model";
    return group_.Load(model, prefix, kBlockSize, kSeqs * kBlocksPerSeq,
                       [&](LoadModelRequest& load) {
                         if (draft_size < 0) return;
                         load.set_draft_model_dir(model);
                         load.set_draft_tensor_parallel_size(draft_size);
                       });
  }

  // Sequence s's step after `output`: its prompt, or its last token asking
  // for `proposals` drafts.
  static SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& output,
                              int proposals) {
    SequenceStep step;
    step.set_seq_id(s + 3);
    if (output.empty()) {
      for (int t : kPrompt) step.add_token_ids((t + 7 * s) % kVocab);
    } else {
      step.add_token_ids(output.back());
      step.set_start_position(static_cast<int>(kPrompt.size() + output.size()) - 1);
      step.set_num_draft_proposals(proposals);
    }
    for (int b = 0; b < kBlocksPerSeq; ++b) step.add_block_table(s * kBlocksPerSeq + b);
    step.set_do_sample(true);
    step.set_sample_index(static_cast<int>(output.size()));
    *step.mutable_sampling() = base;
    std::map<int, int> counts;
    for (int t : output) ++counts[t];
    for (const auto& [id, count] : counts) {
      step.mutable_sampling()->add_output_token_ids(id);
      step.mutable_sampling()->add_output_token_counts(count);
    }
    return step;
  }

  // kNewTokens tokens for each sequence; every decode step asks the draft
  // for up to kDrafts proposals when `propose` (never past kNewTokens).
  // With `ahead`, as the server runs a constrained row instead: each step
  // asks for proposals after it (num_next_draft_proposals) and verifies
  // the last step's as draft_token_ids.
  static std::vector<Generated> Generate(std::vector<std::unique_ptr<ModelRunner>>& ranks,
                                         const SamplingOptions& base, bool propose,
                                         bool ahead = false) {
    std::vector<Generated> outs(kSeqs);
    std::vector<std::vector<int>> next(kSeqs);  // Each sequence's last proposals.
    for (int step_index = 0; step_index < 2 * kNewTokens; ++step_index) {
      StepPlan plan;
      plan.set_step_id(step_index);
      std::vector<int> members;
      for (int s = 0; s < kSeqs; ++s) {
        const int left = kNewTokens - static_cast<int>(outs[s].tokens.size());
        if (left <= 0) continue;
        const int proposals = propose && !ahead ? std::min(kDrafts, left - 1) : 0;
        SequenceStep* step = plan.add_sequences();
        *step = StepFor(base, s, outs[s].tokens, proposals);
        if (ahead) {
          const int drafts = std::min(static_cast<int>(next[s].size()), left - 1);
          step->mutable_draft_token_ids()->Add(next[s].begin(), next[s].begin() + drafts);
          step->set_num_next_draft_proposals(std::max(0, std::min(kDrafts, left - 2 - drafts)));
        }
        members.push_back(s);
      }
      if (members.empty()) break;
      absl::StatusOr<StepResult> result = TwoRankCpuGroup::RunOnBoth(ranks, plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok() || result->tokens_size() != static_cast<int>(members.size())) return outs;
      for (size_t i = 0; i < members.size(); ++i) {
        const SampledToken& token = result->tokens(static_cast<int>(i));
        Generated& out = outs[members[i]];
        const SequenceStep& step = plan.sequences(static_cast<int>(i));
        out.proposed += step.num_draft_proposals() + step.draft_token_ids_size();
        next[members[i]].assign(token.next_draft_ids().begin(), token.next_draft_ids().end());
        out.accepted += token.accepted_draft_ids_size();
        for (int id : token.accepted_draft_ids()) out.tokens.push_back(id);
        out.tokens.push_back(token.token_id());
      }
    }
    return outs;
  }

  std::string dir_;
  TwoRankCpuGroup group_;
};

TEST_F(DraftTensorParallelTest, ShardedDraftProposesOnEveryRankAndKeepsPlainTokens) {
  SamplingOptions greedy;
  SamplingOptions seeded;
  seeded.set_temperature(0.9f);
  seeded.set_seed(11);
  SamplingOptions penalized = seeded;  // Which the draft does not apply.
  penalized.set_frequency_penalty(0.5f);
  const std::vector<SamplingOptions> kinds = {greedy, seeded, penalized};
  std::vector<std::vector<Generated>> plain;
  TwoRankCpuGroup::Loaded loaded = LoadGroup("plain", /*draft_size=*/-1);
  ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
  for (const SamplingOptions& base : kinds) plain.push_back(Generate(loaded.ranks, base, false));
  const int64_t target_bytes = loaded.responses[1].bytes_per_block();
  loaded = LoadGroup("sharded", /*draft_size=*/2);
  ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
  // Each rank holds its shard of the draft's cache beside the target's.
  EXPECT_EQ(loaded.responses[0].bytes_per_block(), 2 * target_bytes);
  EXPECT_EQ(loaded.responses[1].bytes_per_block(), 2 * target_bytes);
  for (size_t b = 0; b < kinds.size(); ++b) {
    const std::vector<Generated> speculative = Generate(loaded.ranks, kinds[b], /*propose=*/true);
    for (int s = 0; s < kSeqs; ++s) {
      SCOPED_TRACE(absl::StrCat(kinds[b].DebugString(), " sequence ", s));
      ASSERT_EQ(plain[b][s].tokens.size(), kNewTokens);
      EXPECT_EQ(speculative[s].tokens, plain[b][s].tokens);
      EXPECT_GT(speculative[s].proposed, 0);
      // The draft's draws are the target's own: all right.
      if (&kinds[b] != &kinds.back()) EXPECT_EQ(speculative[s].accepted, speculative[s].proposed);
    }
  }
}

// Proposing a step ahead (a constrained row's way) at two ranks: a draft
// sharded over both (rank 0 shares what each step accepted before the
// passes) and one whole on rank 0. The target as its own draft: plain
// decoding's tokens, every proposal accepted.
TEST_F(DraftTensorParallelTest, ProposingAheadKeepsPlainTokensAtBothDraftSizes) {
  SamplingOptions greedy;
  SamplingOptions seeded;
  seeded.set_temperature(0.9f);
  seeded.set_seed(11);
  const std::vector<SamplingOptions> kinds = {greedy, seeded};
  std::vector<std::vector<Generated>> plain;
  TwoRankCpuGroup::Loaded loaded = LoadGroup("plain", /*draft_size=*/-1);
  ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
  for (const SamplingOptions& base : kinds) plain.push_back(Generate(loaded.ranks, base, false));
  for (int draft_size : {2, 1}) {
    loaded = LoadGroup(absl::StrCat("ahead", draft_size), draft_size);
    ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
    for (size_t b = 0; b < kinds.size(); ++b) {
      const std::vector<Generated> ahead = Generate(loaded.ranks, kinds[b], true, /*ahead=*/true);
      for (int s = 0; s < kSeqs; ++s) {
        SCOPED_TRACE(absl::StrCat("size ", draft_size, " ", kinds[b].DebugString(), " seq ", s));
        EXPECT_EQ(ahead[s].tokens, plain[b][s].tokens);
        EXPECT_GT(ahead[s].proposed, 0);
        EXPECT_EQ(ahead[s].accepted, ahead[s].proposed);
      }
    }
  }
}

TEST_F(DraftTensorParallelTest, DraftWholeOnRankZeroOrRefused) {
  TwoRankCpuGroup::Loaded loaded = LoadGroup("plain", /*draft_size=*/-1);
  ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
  const int64_t target_bytes = loaded.responses[1].bytes_per_block();
  loaded = LoadGroup("whole", /*draft_size=*/1);
  ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
  // Rank 0 holds the whole draft's cache (both KV heads), rank 1 none.
  EXPECT_EQ(loaded.responses[0].bytes_per_block(), 3 * target_bytes);
  EXPECT_EQ(loaded.responses[1].bytes_per_block(), target_bytes);
  // Each rank refuses alone, before joining the group.
  loaded = LoadGroup("three", /*draft_size=*/3);
  EXPECT_TRUE(loaded.ranks.empty());
  for (const absl::Status& status : loaded.status) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(),
                                  "draft_tensor_parallel_size 3 must be 1 or the world size 2"))
        << status;
  }
}

}  // namespace
}  // namespace pagoda::worker

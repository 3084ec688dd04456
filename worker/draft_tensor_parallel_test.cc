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
// sizes that are neither. An EAGLE or EAGLE-3 head (also one with
// use_aux_hidden_state false) sharded over both ranks
// proposes the very drafts it proposes whole on rank 0, and the float64
// reference's under greedy decoding; a head whose heads do not split over
// the group is refused.

#include <stdio.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
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
constexpr int kVocab = 48;  // Above eagle3_reference.py's draft vocabulary (40).
constexpr int kNewTokens = 12;
constexpr int kDrafts = 3;
const std::vector<int> kPrompt = {3, 9, 4, 17, 22};

struct Generated {
  std::vector<int> tokens;
  int proposed = 0;
  int accepted = 0;
  std::vector<int> accepted_per_step;  // Steps that verified drafts.
  std::vector<int> next_drafts;        // Every step's next_draft_ids, in order.
};

std::string Python() {
  const char* python = std::getenv("PAGODA_PYTHON3");
  return python != nullptr ? python : "/usr/bin/python3";
}
std::string SourceDir() {
  const char* dir = std::getenv("PAGODA_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

// What `command` prints, trailing whitespace dropped; a failure is reported.
std::string Output(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char chunk[256];
  while (pipe != nullptr && fgets(chunk, sizeof(chunk), pipe) != nullptr) out += chunk;
  EXPECT_TRUE(pipe != nullptr && pclose(pipe) == 0) << command;
  return std::string(absl::StripTrailingAsciiWhitespace(out));
}

class DraftTensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeRunnerTestModel("pagoda_draft_tp", kVocab, /*seed=*/23);
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Both ranks of a fresh group with the target as its own draft at
  // `draft_size` (-1: no draft), or the EAGLE (EAGLE-3) head `head`.
  TwoRankCpuGroup::Loaded LoadGroup(const std::string& prefix, int draft_size,
                                    const std::string& head = "", bool eagle3 = false) {
    const std::string model = dir_ + "/model";
    return group_.Load(model, prefix, kBlockSize, kSeqs * kBlocksPerSeq,
                       [&](LoadModelRequest& load) {
                         if (draft_size < 0) return;
                         load.set_draft_model_dir(head.empty() ? model : head);
                         load.set_draft_is_eagle_head(!head.empty() && !eagle3);
                         load.set_draft_is_eagle3_head(eagle3);
                         load.set_draft_tensor_parallel_size(draft_size);
                       });
  }

  // EAGLE heads for the target under dir_: eagle/model (eagle_reference.py
  // make: the target's layers, a random fc), eagle3/model (eagle3_reference.py
  // make over a one-layer Llama, a 40-id draft vocabulary, a second layer
  // after the first: both split over the group), eagle3_no_aux/model (the
  // same without fc: use_aux_hidden_state false, the target's final-normed
  // hidden states as its features), and
  // one_head/model, eagle/model whose config claims one attention (and KV)
  // head, which two ranks cannot split (refused before any weight is read).
  void MakeHeads() {
    const std::string command = absl::StrCat(
        Python(), " ", SourceDir(), "/scripts/make_tiny_model.py --arch llama --vocab-size ",
        kVocab, " --hidden-size 32 --intermediate-size 40 --num-layers 1 --num-heads 2",
        " --num-kv-heads 1 --max-position-embeddings 64 --dtype f32 --seed 3 --out ", dir_,
        "/source > /dev/null && ", Python(), " ", SourceDir(),
        "/tests/reference/eagle_reference.py make --source ", dir_, "/model --out ", dir_,
        "/eagle/model && ", Python(), " ", SourceDir(),
        "/tests/reference/eagle3_reference.py make --num-layers 2 --source ", dir_,
        "/source --target-vocab ", kVocab, " --out ", dir_, "/eagle3/model && ", Python(), " ",
        SourceDir(), "/tests/reference/eagle3_reference.py make --num-layers 2 --no-aux",
        " --source ", dir_, "/source --target-vocab ", kVocab, " --out ", dir_,
        "/eagle3_no_aux/model");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::filesystem::copy(dir_ + "/eagle", dir_ + "/one_head",
                          std::filesystem::copy_options::recursive);
    std::ifstream in(dir_ + "/eagle/model/config.json");
    std::stringstream config;
    config << in.rdbuf();
    const std::string one_head = absl::StrReplaceAll(
        config.str(), {{"\"num_attention_heads\": 4", "\"num_attention_heads\": 1"},
                       {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 1"}});
    ASSERT_NE(one_head, config.str());
    std::ofstream(dir_ + "/one_head/model/config.json") << one_head;
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
        if (step.num_draft_proposals() + step.draft_token_ids_size() > 0) {
          out.accepted_per_step.push_back(token.accepted_draft_ids_size());
        }
        out.next_drafts.insert(out.next_drafts.end(), token.next_draft_ids().begin(),
                               token.next_draft_ids().end());
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
      if (&kinds[b] != &kinds.back()) {
        EXPECT_EQ(speculative[s].accepted, speculative[s].proposed);
      }
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

// An EAGLE and two EAGLE-3 heads (with aux hidden states and without:
// use_aux_hidden_state false) sharded over both ranks (their decoder
// layer split as the target's, the fc replicated, each rank reading its own
// copy of the target's hidden states, rank 0's picks shared after each
// pass) against the same head whole on rank 0: the same drafts (the same
// acceptance per step, and the same proposals a step ahead), greedy and
// seeded, and plain decoding's tokens; greedy, the float64 reference's
// speculative decoding of sequence 0. A head the group cannot split is
// refused.
TEST_F(DraftTensorParallelTest, ShardedEagleHeadsProposeAsTheWholeHead) {
  MakeHeads();
  SamplingOptions greedy;
  SamplingOptions seeded;
  seeded.set_temperature(0.9f);
  seeded.set_seed(11);
  const std::vector<SamplingOptions> kinds = {greedy, seeded};
  std::vector<std::vector<Generated>> plain;
  TwoRankCpuGroup::Loaded loaded = LoadGroup("plain", /*draft_size=*/-1);
  ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
  for (const SamplingOptions& base : kinds) plain.push_back(Generate(loaded.ranks, base, false));
  for (const char* name : {"eagle", "eagle3", "eagle3_no_aux"}) {
    const bool eagle3 = absl::StartsWith(name, "eagle3");
    const std::string head = absl::StrCat(dir_, "/", name, "/model");
    // Per draft size, kind and mode (in the step, ahead): what it generated.
    std::map<int, std::vector<std::vector<Generated>>> runs;
    for (int draft_size : {1, 2}) {
      loaded = LoadGroup(absl::StrCat(name, draft_size), draft_size, head, eagle3);
      ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
      for (size_t b = 0; b < kinds.size(); ++b) {
        for (bool ahead : {false, true}) {
          runs[draft_size].push_back(Generate(loaded.ranks, kinds[b], true, ahead));
          for (int s = 0; s < kSeqs; ++s) {
            SCOPED_TRACE(absl::StrCat(name, " size ", draft_size, " ", kinds[b].DebugString(),
                                      " ahead ", ahead, " seq ", s));
            EXPECT_EQ(runs[draft_size].back()[s].tokens, plain[b][s].tokens);
            EXPECT_GT(runs[draft_size].back()[s].proposed, 0);
          }
        }
      }
    }
    for (size_t run = 0; run < runs[1].size(); ++run) {
      for (int s = 0; s < kSeqs; ++s) {
        SCOPED_TRACE(absl::StrCat(name, " run ", run, " seq ", s));
        EXPECT_EQ(runs[2][run][s].accepted_per_step, runs[1][run][s].accepted_per_step);
        EXPECT_EQ(runs[2][run][s].next_drafts, runs[1][run][s].next_drafts);
      }
    }
    const Generated& sharded_greedy = runs[2][0][0];
    EXPECT_EQ(absl::StrCat("{\"tokens\": [", absl::StrJoin(sharded_greedy.tokens, ", "),
                           "], \"accepted\": [",
                           absl::StrJoin(sharded_greedy.accepted_per_step, ", "), "]}"),
              Output(absl::StrCat(Python(), " ", SourceDir(), "/tests/reference/",
                                  eagle3 ? "eagle3_reference.py" : "eagle_reference.py",
                                  " simulate --k ", kDrafts, " --max-tokens ", kNewTokens,
                                  " --tokens ", absl::StrJoin(kPrompt, ","), " --target ", dir_,
                                  "/model --head ", head)));
  }
  // Each rank refuses, in one line, a head whose attention heads do not
  // split over the group.
  loaded = LoadGroup("one_head", 2, dir_ + "/one_head/model");
  EXPECT_TRUE(loaded.ranks.empty());
  for (const absl::Status& status : loaded.status) {
    EXPECT_EQ(status.message(),
              "EAGLE head: cannot split the model over 2 tensor-parallel ranks: "
              "num_attention_heads (1) is not divisible by 2")
        << status;
  }
}

}  // namespace
}  // namespace pagoda::worker

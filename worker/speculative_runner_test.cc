// Speculative verification through the CPU ModelRunner on a tiny random
// Llama: a step with k drafts computes k + 1 query rows (the drafts' KV
// written and attended causally), and its tokens, logprobs and top logprobs
// equal plain one-token decoding's, greedy and seeded, whether the drafts
// are all right, all wrong or mixed. A rejected draft's KV slot is simply
// rewritten by the next step (start_position moves back), which the mixed
// runs exercise.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/runner_test_model.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::InitCacheRequest;
using pagoda::worker::v1::LoadModelRequest;
using pagoda::worker::v1::SampledToken;
using pagoda::worker::v1::SamplingOptions;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;

constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 6;  // 24 tokens: the prompt, 13 new, 4 drafts past them.
constexpr int kMaxSeqs = 3;
constexpr int kGpuBlocks = kMaxSeqs * kBlocksPerSeq;
constexpr int kVocab = 50;
constexpr int kNewTokens = 13;
constexpr int kDrafts = 4;
const std::vector<int> kPrompt = {5, 17, 3, 42, 8, 11};

// One decoded request: per output position its token, logprob and top ids.
struct Decoded {
  std::vector<int> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<int>> top_ids;
  int steps = 0;
  int proposed = 0;
  int accepted = 0;
};

// Drafts for the next step given the output so far.
using Proposer = std::function<std::vector<int>(const std::vector<int>& output)>;

class SpeculativeRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeRunnerTestModel("pagoda_spec_runner", kVocab, /*seed=*/11));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static std::unique_ptr<ModelRunner> ReadyRunner() {
    return ReadyCpuRunner(*dir_, kBlockSize, kGpuBlocks);
  }

  // Sequence s's step when its output so far is `output` (its counts folded
  // into the options, as the server does): its own prompt and blocks.
  static SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& output,
                              const std::vector<int>& drafts) {
    SequenceStep step;
    step.set_seq_id(s + 1);
    if (output.empty()) {
      for (int t : kPrompt) step.add_token_ids((t + 3 * s) % kVocab);
    } else {
      step.add_token_ids(output.back());
      step.set_start_position(static_cast<int>(kPrompt.size() + output.size()) - 1);
    }
    for (int d : drafts) step.add_draft_token_ids(d);
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

  // Adds what one step returned for a sequence to its output.
  static void Absorb(const SampledToken& token, const std::vector<int>& drafts, Decoded& out) {
    const int accepted = token.accepted_draft_ids_size();
    const int top = token.top_size();
    EXPECT_EQ(token.accepted_draft_logprobs_size(), accepted);
    EXPECT_EQ(token.accepted_draft_top_size(), accepted * top);
    for (int j = 0; j < accepted; ++j) {
      EXPECT_EQ(token.accepted_draft_ids(j), drafts[j]);
      out.tokens.push_back(token.accepted_draft_ids(j));
      out.logprobs.push_back(token.accepted_draft_logprobs(j));
      std::vector<int> ids;
      for (int i = 0; i < top; ++i) ids.push_back(token.accepted_draft_top(j * top + i).token_id());
      out.top_ids.push_back(ids);
    }
    out.tokens.push_back(token.token_id());
    out.logprobs.push_back(token.logprob());
    std::vector<int> ids;
    for (const auto& entry : token.top()) ids.push_back(entry.token_id());
    out.top_ids.push_back(ids);
    ++out.steps;
    out.proposed += static_cast<int>(drafts.size());
    out.accepted += accepted;
  }

  // kNewTokens tokens for each of proposers.size() sequences on a fresh
  // runner, in one batch; sequence s joins at step s (so its prefill shares
  // a plan with the others' drafts). Each step verifies what its proposer
  // gives (at most kDrafts, never past kNewTokens).
  static std::vector<Decoded> DecodeBatch(const SamplingOptions& base,
                                          const std::vector<Proposer>& proposers) {
    auto runner = ReadyRunner();
    std::vector<Decoded> outs(proposers.size());
    for (int step_index = 0;; ++step_index) {
      StepPlan plan;
      std::vector<int> members;
      std::vector<std::vector<int>> drafts_of;
      for (int s = 0; s < static_cast<int>(proposers.size()) && s <= step_index; ++s) {
        const std::vector<int>& output = outs[s].tokens;
        if (static_cast<int>(output.size()) >= kNewTokens) continue;
        std::vector<int> drafts = output.empty() ? std::vector<int>() : proposers[s](output);
        drafts.resize(std::min<size_t>(
            {drafts.size(), static_cast<size_t>(kDrafts), kNewTokens - output.size() - 1}));
        *plan.add_sequences() = StepFor(base, s, output, drafts);
        members.push_back(s);
        drafts_of.push_back(drafts);
      }
      if (plan.sequences().empty() && step_index >= static_cast<int>(proposers.size())) break;
      auto result = runner->ExecuteStep(plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return outs;
      EXPECT_EQ(result->tokens_size(), static_cast<int>(members.size()));
      for (int i = 0; i < result->tokens_size() && i < static_cast<int>(members.size()); ++i) {
        EXPECT_EQ(result->tokens(i).seq_id(), members[i] + 1);
        Absorb(result->tokens(i), drafts_of[i], outs[members[i]]);
      }
    }
    return outs;
  }

  static Decoded Decode(const SamplingOptions& base, const Proposer& propose) {
    return DecodeBatch(base, {propose})[0];
  }

  static void ExpectSameAsPlain(const Decoded& plain, const Decoded& speculative,
                                const std::string& what) {
    EXPECT_EQ(speculative.tokens, plain.tokens) << what;
    EXPECT_EQ(speculative.top_ids, plain.top_ids) << what;
    ASSERT_EQ(speculative.logprobs.size(), plain.logprobs.size()) << what;
    for (size_t i = 0; i < plain.logprobs.size(); ++i) {
      EXPECT_NEAR(speculative.logprobs[i], plain.logprobs[i], 1e-4) << what << " position " << i;
    }
  }

  // Plain decoding, then the same request with right, wrong and mixed drafts.
  static void CheckIdentity(const SamplingOptions& base) {
    const Decoded plain = Decode(base, [](const std::vector<int>&) { return std::vector<int>(); });
    ASSERT_EQ(plain.tokens.size(), kNewTokens);
    EXPECT_EQ(plain.steps, kNewTokens);
    auto oracle = [&](const std::vector<int>& output) {
      return std::vector<int>(plain.tokens.begin() + output.size(), plain.tokens.end());
    };
    const Decoded right = Decode(base, oracle);
    ExpectSameAsPlain(plain, right, "right drafts");
    EXPECT_EQ(right.accepted, right.proposed);
    // The prefill, then ceil(12 / (k + 1)) verify steps.
    EXPECT_EQ(right.steps, 1 + (kNewTokens - 1 + kDrafts) / (kDrafts + 1));

    const Decoded wrong = Decode(base, [&](const std::vector<int>& output) {
      std::vector<int> drafts = oracle(output);
      for (int& d : drafts) d = (d + 1) % kVocab;
      return drafts;
    });
    ExpectSameAsPlain(plain, wrong, "wrong drafts");
    EXPECT_EQ(wrong.accepted, 0);
    EXPECT_GT(wrong.proposed, 0);

    const Decoded mixed = Decode(base, [&](const std::vector<int>& output) {
      std::vector<int> drafts = oracle(output);
      for (size_t j = 0; j < drafts.size(); ++j) {
        if ((output.size() + j) % 3 == 2) drafts[j] = (drafts[j] + 7) % kVocab;
      }
      return drafts;
    });
    ExpectSameAsPlain(plain, mixed, "mixed drafts");
    EXPECT_GT(mixed.accepted, 0);
    EXPECT_LT(mixed.accepted, mixed.proposed);
  }

  static std::string* dir_;
};

std::string* SpeculativeRunnerTest::dir_ = nullptr;

TEST_F(SpeculativeRunnerTest, GreedyTokensEqualPlainDecoding) {
  SamplingOptions greedy;
  greedy.set_num_logprobs(3);
  CheckIdentity(greedy);
}

SamplingOptions SampledWithProcessing() {
  SamplingOptions sampled;
  sampled.set_temperature(0.9f);
  sampled.set_top_k(20);
  sampled.set_top_p(0.95f);
  sampled.set_min_p(0.02f);
  sampled.set_seed(42);
  sampled.set_num_logprobs(3);
  sampled.set_frequency_penalty(0.4f);
  sampled.set_presence_penalty(0.2f);
  sampled.set_repetition_penalty(1.2f);
  for (int t : kPrompt) sampled.add_prompt_token_ids(t);
  sampled.add_logit_bias_token_ids(7);
  sampled.add_logit_bias_values(2.0f);
  return sampled;
}

TEST_F(SpeculativeRunnerTest, SeededSamplingWithProcessingEqualsPlainDecoding) {
  CheckIdentity(SampledWithProcessing());
}

// Sequences with different draft counts (4 right, none, 2 half wrong) in one
// plan, joining at different steps (a prefill beside verify rows): each
// gets the tokens it gets in a plain batch.
TEST_F(SpeculativeRunnerTest, BatchedSequencesWithDifferentDraftCounts) {
  const SamplingOptions base = SampledWithProcessing();
  auto none = [](const std::vector<int>&) { return std::vector<int>(); };
  const std::vector<Decoded> plain = DecodeBatch(base, {none, none, none});
  ASSERT_EQ(plain.size(), kMaxSeqs);
  auto oracle = [&](int s, size_t count, int corrupt_every) {
    return [&plain, s, count, corrupt_every](const std::vector<int>& output) {
      std::vector<int> drafts(plain[s].tokens.begin() + output.size(), plain[s].tokens.end());
      drafts.resize(std::min(drafts.size(), count));
      for (size_t j = 0; j < drafts.size(); ++j) {
        if (corrupt_every > 0 && (output.size() + j) % corrupt_every == 1) drafts[j] ^= 1;
      }
      return drafts;
    };
  };
  const std::vector<Decoded> speculative =
      DecodeBatch(base, {oracle(0, 4, 0), none, oracle(2, 2, 2)});
  for (int s = 0; s < kMaxSeqs; ++s) {
    ExpectSameAsPlain(plain[s], speculative[s], absl::StrCat("sequence ", s));
  }
  EXPECT_EQ(speculative[0].accepted, speculative[0].proposed);
  EXPECT_GT(speculative[0].proposed, 0);
  EXPECT_EQ(speculative[1].proposed, 0);
  EXPECT_GT(speculative[2].accepted, 0);
  EXPECT_LT(speculative[2].accepted, speculative[2].proposed);
  // Different prompts: the sequences are not one sequence three times.
  EXPECT_NE(plain[0].tokens, plain[1].tokens);
}

}  // namespace
}  // namespace pagoda::worker

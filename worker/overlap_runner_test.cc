// Overlapped scheduling's placeholders through the CPU ModelRunner on a tiny
// random Llama: a sequence decoded with input_from_last_sample rows (the
// plan built before the previous step's token is known: a placeholder input
// and output counts without that token) gets exactly the tokens, logprobs
// and top logprobs of plain decoding, greedy and seeded with penalties, in
// a batch where sequences join (a prefill beside placeholder rows) and some
// steps send the real token. Plans that refer to a token the worker does not
// hold (never sampled, sampled two steps ago, a refused step between, a
// plan that is not the next step, a new cache or a new worker) are refused
// with INVALID_ARGUMENT naming the seq_id.

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
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
using ::testing::HasSubstr;

constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 5;  // 20 tokens: the prompt and kNewTokens.
constexpr int kMaxSeqs = 3;
constexpr int kGpuBlocks = kMaxSeqs * kBlocksPerSeq;
constexpr int kVocab = 50;
constexpr int kNewTokens = 12;
const std::vector<int> kPrompt = {5, 17, 3, 42, 8, 11};

// One decoded sequence: per output position its token, logprob and top ids.
struct Decoded {
  std::vector<int> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<int>> top_ids;
  int placeholder_steps = 0;
};

// Whether sequence s's step after `known` output tokens uses a placeholder.
using OverlapRule = bool (*)(int s, int known);

class OverlapRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeRunnerTestModel("pagoda_overlap_runner", kVocab, /*seed=*/13));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static std::unique_ptr<ModelRunner> ReadyRunner() {
    return ReadyCpuRunner(*dir_, kBlockSize, kGpuBlocks);
  }

  // Sequence s's step as the server plans it: `known` output tokens it has
  // received, and `in_flight` (0 or 1) more sampled but not yet received.
  // With one in flight the input is a placeholder (a token the model would
  // read wrongly if left there) and the counts stop at the known tokens.
  static SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& known,
                              int in_flight) {
    SequenceStep step;
    step.set_seq_id(s + 1);
    const int output_len = static_cast<int>(known.size()) + in_flight;
    if (output_len == 0) {
      for (int t : kPrompt) step.add_token_ids((t + 3 * s) % kVocab);
    } else {
      step.add_token_ids(in_flight == 1 ? (known.empty() ? 1 : known.back() + 1) % kVocab
                                        : known.back());
      step.set_start_position(static_cast<int>(kPrompt.size()) + output_len - 1);
      step.set_input_from_last_sample(in_flight == 1);
    }
    for (int b = 0; b < kBlocksPerSeq; ++b) step.add_block_table(s * kBlocksPerSeq + b);
    step.set_do_sample(true);
    step.set_sample_index(output_len);
    *step.mutable_sampling() = base;
    std::map<int, int> counts;
    for (int t : known) ++counts[t];
    for (const auto& [id, count] : counts) {
      step.mutable_sampling()->add_output_token_ids(id);
      step.mutable_sampling()->add_output_token_counts(count);
    }
    return step;
  }

  static void Absorb(const SampledToken& token, Decoded& out) {
    out.tokens.push_back(token.token_id());
    out.logprobs.push_back(token.logprob());
    std::vector<int> ids;
    for (const auto& entry : token.top()) ids.push_back(entry.token_id());
    out.top_ids.push_back(ids);
  }

  // kNewTokens tokens for each of `num_seqs` sequences on a fresh runner, in
  // one batch; sequence s joins at step s. Where `overlap` says so, a step
  // is planned before the previous step's token of that sequence is read:
  // it is absorbed only after the plan is built.
  static std::vector<Decoded> DecodeBatch(const SamplingOptions& base, int num_seqs,
                                          OverlapRule overlap) {
    auto runner = ReadyRunner();
    std::vector<Decoded> outs(num_seqs);
    std::vector<std::vector<SampledToken>> pending(num_seqs);  // Sampled, not yet read.
    for (int step_index = 0;; ++step_index) {
      StepPlan plan;
      plan.set_step_id(step_index);
      std::vector<int> members;
      for (int s = 0; s < num_seqs && s <= step_index; ++s) {
        const int in_flight = static_cast<int>(pending[s].size());
        const int known = static_cast<int>(outs[s].tokens.size());
        if (known + in_flight >= kNewTokens) continue;
        // The server reads a token it needs to send for real.
        if (in_flight == 1 && !overlap(s, known)) {
          Absorb(pending[s][0], outs[s]);
          pending[s].clear();
        }
        const int still = static_cast<int>(pending[s].size());
        *plan.add_sequences() = StepFor(base, s, outs[s].tokens, still);
        if (still == 1) ++outs[s].placeholder_steps;
        members.push_back(s);
      }
      // Step N's tokens are read after step N + 1 was planned.
      for (int s = 0; s < num_seqs; ++s) {
        for (const SampledToken& token : pending[s]) Absorb(token, outs[s]);
        pending[s].clear();
      }
      if (plan.sequences().empty()) {
        if (step_index >= num_seqs) break;
        continue;
      }
      auto result = runner->ExecuteStep(plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return outs;
      EXPECT_EQ(result->tokens_size(), static_cast<int>(members.size()));
      for (int i = 0; i < result->tokens_size() && i < static_cast<int>(members.size()); ++i) {
        EXPECT_EQ(result->tokens(i).seq_id(), members[i] + 1);
        pending[members[i]].push_back(result->tokens(i));
      }
    }
    return outs;
  }

  static void ExpectSameAsPlain(const Decoded& plain, const Decoded& overlapped,
                                const std::string& what) {
    EXPECT_EQ(overlapped.tokens, plain.tokens) << what;
    EXPECT_EQ(overlapped.top_ids, plain.top_ids) << what;
    ASSERT_EQ(overlapped.logprobs.size(), plain.logprobs.size()) << what;
    for (size_t i = 0; i < plain.logprobs.size(); ++i) {
      EXPECT_NEAR(overlapped.logprobs[i], plain.logprobs[i], 1e-5) << what << " position " << i;
    }
  }

  static void CheckIdentity(const SamplingOptions& base) {
    const auto never = [](int, int) { return false; };
    const auto always = [](int, int) { return true; };
    // Sequence 1 sends the real token every third step: mixed rows.
    const auto mixed = [](int s, int known) { return s != 1 || known % 3 != 0; };
    const std::vector<Decoded> plain = DecodeBatch(base, kMaxSeqs, never);
    for (const auto& [rule, name] : {std::pair<OverlapRule, const char*>{always, "always"},
                                     std::pair<OverlapRule, const char*>{mixed, "mixed"}}) {
      const std::vector<Decoded> overlapped = DecodeBatch(base, kMaxSeqs, rule);
      for (int s = 0; s < kMaxSeqs; ++s) {
        ASSERT_EQ(plain[s].tokens.size(), kNewTokens);
        EXPECT_EQ(plain[s].placeholder_steps, 0);
        // Every step after the prefill's: kNewTokens - 1, fewer when mixed.
        EXPECT_GT(overlapped[s].placeholder_steps, kNewTokens / 2) << name;
        ExpectSameAsPlain(plain[s], overlapped[s], absl::StrCat(name, ", sequence ", s));
      }
    }
    // Different prompts: the sequences are not one sequence three times.
    EXPECT_NE(plain[0].tokens, plain[1].tokens);
  }

  static std::string* dir_;
};

std::string* OverlapRunnerTest::dir_ = nullptr;

TEST_F(OverlapRunnerTest, GreedyPlaceholdersEqualPlainDecoding) {
  SamplingOptions greedy;
  greedy.set_num_logprobs(3);
  CheckIdentity(greedy);
}

TEST_F(OverlapRunnerTest, SeededSamplingWithPenaltiesEqualsPlainDecoding) {
  SamplingOptions sampled;
  sampled.set_temperature(0.9f);
  sampled.set_top_k(20);
  sampled.set_top_p(0.95f);
  sampled.set_seed(42);
  sampled.set_num_logprobs(3);
  sampled.set_frequency_penalty(0.9f);
  sampled.set_presence_penalty(0.5f);
  sampled.set_repetition_penalty(1.3f);
  for (int t : kPrompt) sampled.add_prompt_token_ids(t);
  CheckIdentity(sampled);
}

// Greedy decoding that rewards repeats (negative penalties): the first
// placeholder row's counts are empty on the wire, so had the worker not
// counted the placeholder's token, that row would miss a boost of 4 and
// draw another token.
TEST_F(OverlapRunnerTest, GreedyWithPenaltiesCountsThePlaceholderToken) {
  SamplingOptions rewarded;
  rewarded.set_num_logprobs(2);
  rewarded.set_frequency_penalty(-2.0f);
  rewarded.set_presence_penalty(-2.0f);
  CheckIdentity(rewarded);
}

void ExpectRefused(const absl::StatusOr<v1::StepResult>& result, int64_t seq_id) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr(absl::StrCat("seq_id ", seq_id, ":")));
  EXPECT_THAT(result.status().message(), HasSubstr("previous step"));
}

TEST_F(OverlapRunnerTest, RefusesAPlaceholderForATokenTheWorkerDoesNotHold) {
  const SamplingOptions greedy;
  auto runner = ReadyRunner();
  int64_t next_step_id = 0;
  // Runs `plan` as the next step (consecutive step ids, as the engine sends).
  auto run = [&](StepPlan plan) {
    plan.set_step_id(next_step_id++);
    return runner->ExecuteStep(plan);
  };
  StepPlan placeholder_for_1;
  *placeholder_for_1.add_sequences() = StepFor(greedy, 0, {}, 1);
  // A fresh worker (a restart) has sampled nothing.
  ExpectRefused(run(placeholder_for_1), 1);

  StepPlan prefill_1;
  *prefill_1.add_sequences() = StepFor(greedy, 0, {}, 0);
  ASSERT_TRUE(run(prefill_1).ok());
  ASSERT_TRUE(run(placeholder_for_1).ok());
  // Sequence 2 was never sampled; the plan is refused whole.
  StepPlan with_2 = placeholder_for_1;
  *with_2.add_sequences() = StepFor(greedy, 1, {}, 1);
  ExpectRefused(run(with_2), 2);
  // The refused step broke the chain: sequence 1's token is gone too.
  ExpectRefused(run(placeholder_for_1), 1);

  // Sampled two steps ago, not in the previous one: stale.
  ASSERT_TRUE(run(prefill_1).ok());
  StepPlan prefill_2;
  *prefill_2.add_sequences() = StepFor(greedy, 1, {}, 0);
  ASSERT_TRUE(run(prefill_2).ok());
  ExpectRefused(run(placeholder_for_1), 1);

  // Out of order: the previous step sampled sequence 1, but the plan says
  // it follows another step (its own id is not the next).
  ASSERT_TRUE(run(prefill_1).ok());
  ++next_step_id;
  ExpectRefused(run(placeholder_for_1), 1);

  // A new cache forgets the tokens (their KV went with the old one).
  ASSERT_TRUE(run(prefill_1).ok());
  InitCacheRequest init;
  init.set_num_gpu_blocks(kGpuBlocks);
  ASSERT_TRUE(runner->InitCache(init).ok());
  ExpectRefused(run(placeholder_for_1), 1);

  // A new worker process: nothing carries over.
  ASSERT_TRUE(run(prefill_1).ok());
  runner = ReadyRunner();
  ExpectRefused(run(placeholder_for_1), 1);
}

}  // namespace
}  // namespace pagoda::worker

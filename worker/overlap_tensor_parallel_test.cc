// Overlapped scheduling under tensor parallelism: two CPU runners in one
// process form a real two-rank group (TCP collectives through a rendezvous
// store). Rank 0 samples; rank 1 must receive each placeholder's token
// before its forward pass (ShareLastSampledTokens), or its half of every
// all-reduce is computed from the wrong input. Sequences decoded with
// placeholders give exactly the tokens and logprobs of the same group
// decoding plainly. The group's lm_head is split over the vocabulary (40
// ids padded to 64: 32 on rank 0, 8 on rank 1): a sampled row's logprobs
// and a prompt's logprobs (every rank computing its part of each slice of
// rows) equal one rank's.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/runner_test_group.h"
#include "tests/support/runner_test_model.h"
#include "worker/model_runner.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SamplingOptions;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 4;
constexpr int kSeqs = 2;
constexpr int kVocab = 40;
constexpr int kNewTokens = 9;
const std::vector<int> kPrompt = {3, 9, 4, 17, 22};

struct Decoded {
  std::vector<int> tokens;
  std::vector<float> logprobs;
};

class OverlapTensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeRunnerTestModel("pagoda_overlap_tp", kVocab, /*seed=*/21);
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& known,
                              bool placeholder) {
    SequenceStep step;
    step.set_seq_id(s + 7);
    const int output_len = static_cast<int>(known.size()) + (placeholder ? 1 : 0);
    if (output_len == 0) {
      for (int t : kPrompt) step.add_token_ids((t + 5 * s) % kVocab);
    } else {
      step.add_token_ids(placeholder ? 0 : known.back());
      step.set_start_position(static_cast<int>(kPrompt.size()) + output_len - 1);
      step.set_input_from_last_sample(placeholder);
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

  // kNewTokens for each sequence on a fresh group, every step after the
  // prefill planned before the previous step's tokens are read when
  // `overlap`.
  std::vector<Decoded> Decode(const SamplingOptions& base, bool overlap,
                              const std::string& prefix) {
    TwoRankCpuGroup::Loaded loaded =
        group_.Load(dir_ + "/model", prefix, kBlockSize, kSeqs * kBlocksPerSeq);
    std::vector<Decoded> outs(kSeqs);
    EXPECT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
    if (loaded.ranks.empty()) return outs;
    std::vector<std::unique_ptr<ModelRunner>>& ranks = loaded.ranks;
    StepResult last;  // Sampled, not yet read.
    for (int step_index = 0; step_index < kNewTokens; ++step_index) {
      const bool in_flight = step_index > 0;
      if (in_flight && !overlap) {
        for (int s = 0; s < kSeqs; ++s) {
          outs[s].tokens.push_back(last.tokens(s).token_id());
          outs[s].logprobs.push_back(last.tokens(s).logprob());
        }
      }
      StepPlan plan;
      plan.set_step_id(step_index);
      for (int s = 0; s < kSeqs; ++s) {
        *plan.add_sequences() = StepFor(base, s, outs[s].tokens, in_flight && overlap);
      }
      if (in_flight && overlap) {
        for (int s = 0; s < kSeqs; ++s) {
          outs[s].tokens.push_back(last.tokens(s).token_id());
          outs[s].logprobs.push_back(last.tokens(s).logprob());
        }
      }
      absl::StatusOr<StepResult> result = TwoRankCpuGroup::RunOnBoth(ranks, plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return outs;
      EXPECT_EQ(result->tokens_size(), kSeqs);
      if (result->tokens_size() != kSeqs) return outs;
      last = *std::move(result);
    }
    for (int s = 0; s < kSeqs; ++s) {
      outs[s].tokens.push_back(last.tokens(s).token_id());
      outs[s].logprobs.push_back(last.tokens(s).logprob());
    }
    return outs;
  }

  std::string dir_;
  TwoRankCpuGroup group_;
};

TEST_F(OverlapTensorParallelTest, PlaceholdersReachEveryRank) {
  SamplingOptions sampled;
  sampled.set_temperature(0.8f);
  sampled.set_seed(5);
  sampled.set_frequency_penalty(-1.5f);
  const std::vector<Decoded> plain = Decode(sampled, /*overlap=*/false, "plain");
  const std::vector<Decoded> overlapped = Decode(sampled, /*overlap=*/true, "overlap");
  for (int s = 0; s < kSeqs; ++s) {
    ASSERT_EQ(plain[s].tokens.size(), kNewTokens);
    EXPECT_EQ(overlapped[s].tokens, plain[s].tokens) << "sequence " << s;
    ASSERT_EQ(overlapped[s].logprobs.size(), plain[s].logprobs.size());
    for (int i = 0; i < kNewTokens; ++i) {
      EXPECT_NEAR(overlapped[s].logprobs[i], plain[s].logprobs[i], 1e-5) << s << ", " << i;
    }
  }
  EXPECT_NE(plain[0].tokens, plain[1].tokens);
}

// A prefill scoring its prompt (6 rows, in slices of the 2-row logits
// region) beside a sampled one, at two ranks and at one.
TEST_F(OverlapTensorParallelTest, SplitLmHeadScoresAsOneRank) {
  StepPlan plan;
  SequenceStep* scored = plan.add_sequences();
  scored->set_seq_id(1);
  const std::vector<int> prompt = {3, 9, 4, 17, 22, 38};
  for (int t : prompt) scored->add_token_ids(t);
  for (int b = 0; b < 2; ++b) scored->add_block_table(b);
  for (int t : {9, 4, 17, 22, 38, 39}) scored->add_prompt_logprob_token_ids(t);
  scored->set_num_prompt_top_logprobs(3);
  SequenceStep* sampled = plan.add_sequences();
  sampled->set_seq_id(2);
  for (int t : {7, 36, 21}) sampled->add_token_ids(t);
  sampled->add_block_table(2);
  sampled->set_do_sample(true);
  sampled->mutable_sampling()->set_num_logprobs(4);
  auto limits = [](v1::LoadModelRequest& load) {
    load.set_max_num_seqs(2);
    load.set_max_num_batched_tokens(16);
  };
  TwoRankCpuGroup::Loaded loaded =
      group_.Load(dir_ + "/model", "scored", kBlockSize, kSeqs * kBlocksPerSeq, limits);
  ASSERT_FALSE(loaded.ranks.empty()) << loaded.status[0] << " / " << loaded.status[1];
  const absl::StatusOr<StepResult> split = TwoRankCpuGroup::RunOnBoth(loaded.ranks, plan);
  ASSERT_TRUE(split.ok()) << split.status();
  std::unique_ptr<ModelRunner> one = CreateCpuModelRunner();
  v1::LoadModelRequest load;
  load.set_model_dir(dir_ + "/model");
  load.set_block_size(kBlockSize);
  load.set_device("cpu");
  load.set_cpu_threads(1);
  load.set_world_size(1);
  load.set_kv_cache_memory_bytes(int64_t{1} << 20);
  limits(load);
  ASSERT_TRUE(one->LoadModel(load).ok());
  v1::InitCacheRequest init;
  init.set_num_gpu_blocks(kSeqs * kBlocksPerSeq);
  ASSERT_TRUE(one->InitCache(init).ok());
  const absl::StatusOr<StepResult> whole = one->ExecuteStep(plan);
  ASSERT_TRUE(whole.ok()) << whole.status();

  ASSERT_EQ(split->tokens_size(), 1);
  ASSERT_EQ(whole->tokens_size(), 1);
  EXPECT_EQ(split->tokens(0).token_id(), whole->tokens(0).token_id());
  EXPECT_NEAR(split->tokens(0).logprob(), whole->tokens(0).logprob(), 1e-5);
  ASSERT_EQ(split->tokens(0).top_size(), 4);
  ASSERT_EQ(whole->tokens(0).top_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(split->tokens(0).top(i).token_id(), whole->tokens(0).top(i).token_id());
    EXPECT_NEAR(split->tokens(0).top(i).logprob(), whole->tokens(0).top(i).logprob(), 1e-5);
  }
  ASSERT_EQ(split->prompt_logprobs_size(), 1);
  ASSERT_EQ(whole->prompt_logprobs_size(), 1);
  const auto& got = split->prompt_logprobs(0);
  const auto& want = whole->prompt_logprobs(0);
  ASSERT_EQ(got.tokens_size(), 6);
  ASSERT_EQ(want.tokens_size(), 6);
  for (int row = 0; row < 6; ++row) {
    SCOPED_TRACE(absl::StrCat("row ", row));
    EXPECT_EQ(got.tokens(row).token_id(), want.tokens(row).token_id());
    EXPECT_NEAR(got.tokens(row).logprob(), want.tokens(row).logprob(), 1e-5);
    ASSERT_EQ(got.tokens(row).top_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got.tokens(row).top(i).token_id(), want.tokens(row).top(i).token_id());
      EXPECT_NEAR(got.tokens(row).top(i).logprob(), want.tokens(row).top(i).logprob(), 1e-5);
    }
  }
}

}  // namespace
}  // namespace pagoda::worker

// Prompt logprobs on the worker: the row scorer on hand-made rows, and the
// CPU runner scoring a chunk's rows (sliced through a small logits region)
// exactly as it scores a sampled row of the same prefix, beside a sampled
// sequence it must not disturb; malformed requests refused.

#include "worker/prompt_logprobs.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/cpu/cpu_model_runner.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::PromptTokenLogprob;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

TEST(ScorePromptRowTest, LogSoftmaxOfTheTokenAndTheTopRankedLowestIdFirst) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, NAN, 0.0f};
  const double normalizer = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(0.0));
  PromptTokenLogprob out;
  ScorePromptRow(logits, /*token_id=*/4, /*num_top=*/3, &out);
  EXPECT_EQ(out.token_id(), 4);
  EXPECT_NEAR(out.logprob(), 0.0 - normalizer, 1e-6);
  ASSERT_EQ(out.top_size(), 3);
  EXPECT_EQ(out.top(0).token_id(), 1);
  EXPECT_EQ(out.top(1).token_id(), 2);
  EXPECT_EQ(out.top(2).token_id(), 0);
  EXPECT_NEAR(out.top(0).logprob(), 3.0 - normalizer, 1e-6);
  EXPECT_NEAR(out.top(2).logprob(), 1.0 - normalizer, 1e-6);
}

TEST(ScorePromptRowTest, NanIsMinusInfinityAndTopIsCappedByTheVocabulary) {
  PromptTokenLogprob out;
  ScorePromptRow(std::vector<float>{NAN, 2.0f}, /*token_id=*/0, /*num_top=*/5, &out);
  EXPECT_TRUE(std::isinf(out.logprob()) && out.logprob() < 0);
  ASSERT_EQ(out.top_size(), 2);
  EXPECT_EQ(out.top(0).token_id(), 1);
  EXPECT_NEAR(out.top(0).logprob(), 0.0, 1e-6);
}

constexpr int kBlockSize = 4;
constexpr int kVocab = 50;
// 2 layers, 2 kv heads, head_dim 8: bytes of one block, K and V, f32.
constexpr int64_t kBytesPerBlock = 2 * 2 * 2 * kBlockSize * 8 * 4;
const std::vector<int> kPrompt = {5, 17, 3, 42, 8, 11};

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

class PromptLogprobsRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/pagoda_prompt_logprobs_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    const std::string command = absl::StrCat(
        EnvOr("PAGODA_PYTHON3", "/usr/bin/python3"), " ", EnvOr("PAGODA_SOURCE_DIR", "."),
        "/scripts/make_tiny_model.py --out ", *dir_, "/model --arch llama --vocab-size ", kVocab,
        " --hidden-size 32 --intermediate-size 48 --num-layers 2 --num-heads 4 --num-kv-heads 2"
        " --max-position-embeddings 64 --dtype f32 --seed 5 > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  // max_num_seqs 2: the logits region holds 2 rows, so 6 rows take 3 slices.
  void SetUp() override {
    runner_ = CreateCpuModelRunner();
    pagoda::worker::v1::LoadModelRequest load;
    load.set_model_dir(*dir_ + "/model");
    load.set_block_size(kBlockSize);
    load.set_device("cpu");
    load.set_world_size(1);
    load.set_max_num_seqs(2);
    load.set_max_num_batched_tokens(16);
    load.set_kv_cache_memory_bytes(kBytesPerBlock * 8);
    ASSERT_TRUE(runner_->LoadModel(load).ok());
    pagoda::worker::v1::InitCacheRequest init;
    init.set_num_gpu_blocks(8);
    ASSERT_TRUE(runner_->InitCache(init).ok());
  }

  StepResult Run(const StepPlan& plan) {
    auto result = runner_->ExecuteStep(plan);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : StepResult();
  }

  static std::string* dir_;
  std::unique_ptr<ModelRunner> runner_;
};

std::string* PromptLogprobsRunnerTest::dir_ = nullptr;

SequenceStep Prefill(int64_t seq_id, std::vector<int> tokens, std::vector<int> blocks) {
  SequenceStep step;
  step.set_seq_id(seq_id);
  for (int t : tokens) step.add_token_ids(t);
  for (int b : blocks) step.add_block_table(b);
  return step;
}

// A sampled row of `prefix` forced (allowed_token_ids) to draw `target`:
// its logprob and top logprobs are the raw ones, the reference.
SequenceStep Forced(int64_t seq_id, std::vector<int> prefix, int target) {
  SequenceStep step = Prefill(seq_id, std::move(prefix), {4, 5});
  step.set_do_sample(true);
  step.mutable_sampling()->set_num_logprobs(3);
  step.mutable_sampling()->add_allowed_token_ids(target);
  return step;
}

TEST_F(PromptLogprobsRunnerTest, ChunkRowsScoreAsSampledRowsOfTheSamePrefix) {
  // Every row's target: the next prompt token, and for the last row a
  // token of the prompt's (unseen) continuation.
  std::vector<int> targets(kPrompt.begin() + 1, kPrompt.end());
  targets.push_back(29);
  SequenceStep scored = Prefill(1, kPrompt, {0, 1});
  for (int t : targets) scored.add_prompt_logprob_token_ids(t);
  scored.set_num_prompt_top_logprobs(3);
  // A sampled sequence in the same step: sampling runs before the rows
  // are scored over the logits region.
  SequenceStep sampled = Prefill(2, {7, 9, 21}, {2});
  sampled.set_do_sample(true);
  sampled.mutable_sampling()->set_num_logprobs(2);
  StepPlan plan;
  *plan.add_sequences() = sampled;
  *plan.add_sequences() = scored;
  const StepResult result = Run(plan);
  ASSERT_EQ(result.tokens_size(), 1);
  ASSERT_EQ(result.prompt_logprobs_size(), 1);
  const auto& entry = result.prompt_logprobs(0);
  EXPECT_EQ(entry.seq_id(), 1);
  ASSERT_EQ(entry.tokens_size(), static_cast<int>(targets.size()));

  StepPlan alone;
  *alone.add_sequences() = sampled;
  const StepResult sampled_alone = Run(alone);
  EXPECT_EQ(result.tokens(0).token_id(), sampled_alone.tokens(0).token_id());
  EXPECT_FLOAT_EQ(result.tokens(0).logprob(), sampled_alone.tokens(0).logprob());

  for (int row = 0; row < static_cast<int>(targets.size()); ++row) {
    SCOPED_TRACE(absl::StrCat("row ", row));
    StepPlan reference;
    *reference.add_sequences() = Forced(
        10 + row, std::vector<int>(kPrompt.begin(), kPrompt.begin() + row + 1), targets[row]);
    const StepResult expected = Run(reference);
    ASSERT_EQ(expected.tokens_size(), 1);
    const auto& got = entry.tokens(row);
    EXPECT_EQ(got.token_id(), targets[row]);
    EXPECT_EQ(expected.tokens(0).token_id(), targets[row]);
    EXPECT_NEAR(got.logprob(), expected.tokens(0).logprob(), 1e-4);
    ASSERT_EQ(got.top_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got.top(i).token_id(), expected.tokens(0).top(i).token_id());
      EXPECT_NEAR(got.top(i).logprob(), expected.tokens(0).top(i).logprob(), 1e-4);
    }
  }
}

TEST_F(PromptLogprobsRunnerTest, MalformedRequestsAreRefused) {
  auto refused = [&](SequenceStep step, const std::string& why) {
    StepPlan plan;
    *plan.add_sequences() = std::move(step);
    auto result = runner_->ExecuteStep(plan);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_NE(result.status().message().find(why), std::string::npos) << result.status();
  };
  SequenceStep too_many = Prefill(1, {5, 17}, {0});
  for (int t : {17, 3, 4}) too_many.add_prompt_logprob_token_ids(t);
  refused(too_many, "3 prompt_logprob_token_ids for 2 token rows");
  SequenceStep outside = Prefill(1, {5, 17}, {0});
  outside.add_prompt_logprob_token_ids(kVocab);
  refused(outside, "prompt logprob token id 50 is outside [0, 50)");
  SequenceStep top = Prefill(1, {5, 17}, {0});
  top.add_prompt_logprob_token_ids(17);
  top.set_num_prompt_top_logprobs(21);
  refused(top, "num_prompt_top_logprobs 21 must be in [0, 20]");
  top.set_num_prompt_top_logprobs(-1);
  refused(top, "num_prompt_top_logprobs -1 must be in [0, 20]");
}

}  // namespace
}  // namespace pagoda::worker

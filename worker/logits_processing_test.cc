// Logits processing on the worker: the edge's checks (worker/logits_edits.h,
// through FlattenStepPlan), the merge into one edit per token, and the host
// sampler's rule (common/logits_processing.h, then min_p, top-k, top-p)
// against a plain double-precision reference written from vLLM v1's order.

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "common/logits_processing.h"
#include "common/sampling_limits.h"
#include "gtest/gtest.h"
#include "worker/flat_batch.h"
#include "worker/logits_edits.h"
#include "worker/sampler.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SamplingOptions;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;

// What a request asks for, in the plan's terms.
struct Processing {
  float presence = 0, frequency = 0, repetition = 0, min_p = 0;
  std::map<int, float> bias;
  std::vector<int> allowed, banned, prompt;
  std::map<int, int> output_counts;
};

SamplingOptions OptionsOf(const Processing& p) {
  SamplingOptions options;
  options.set_presence_penalty(p.presence);
  options.set_frequency_penalty(p.frequency);
  options.set_repetition_penalty(p.repetition);
  options.set_min_p(p.min_p);
  for (const auto& [id, bias] : p.bias) {
    options.add_logit_bias_token_ids(id);
    options.add_logit_bias_values(bias);
  }
  for (int id : p.allowed) options.add_allowed_token_ids(id);
  for (int id : p.banned) options.add_banned_token_ids(id);
  for (int id : p.prompt) options.add_prompt_token_ids(id);
  for (const auto& [id, count] : p.output_counts) {
    options.add_output_token_ids(id);
    options.add_output_token_counts(count);
  }
  return options;
}

// vLLM v1's processing in double, token by token over the whole vocabulary.
std::vector<double> ReferenceProcessed(const std::vector<float>& raw, const Processing& p) {
  const double repetition = p.repetition == 0 ? 1.0 : p.repetition;
  std::vector<double> x(raw.begin(), raw.end());
  for (size_t t = 0; t < x.size(); ++t) {
    const int id = static_cast<int>(t);
    const bool allowed = p.allowed.empty() ||
                         std::find(p.allowed.begin(), p.allowed.end(), id) != p.allowed.end();
    const bool banned = std::find(p.banned.begin(), p.banned.end(), id) != p.banned.end();
    if (!allowed || banned) {
      x[t] = -INFINITY;
      continue;
    }
    if (auto it = p.bias.find(id); it != p.bias.end()) x[t] += it->second;
    const auto count_it = p.output_counts.find(id);
    const int count = count_it == p.output_counts.end() ? 0 : count_it->second;
    const bool in_prompt = std::find(p.prompt.begin(), p.prompt.end(), id) != p.prompt.end();
    if (in_prompt || count > 0) x[t] = x[t] > 0 ? x[t] / repetition : x[t] * repetition;
    x[t] -= p.frequency * count;
    if (count > 0) x[t] -= p.presence;
  }
  return x;
}

// Probabilities of the processed row at temperature T with min_p.
std::vector<double> ReferenceProbabilities(const std::vector<double>& x, double temperature,
                                           double min_p) {
  const double max_x = *std::max_element(x.begin(), x.end());
  std::vector<double> probs(x.size());
  double sum = 0;
  for (size_t t = 0; t < x.size(); ++t) sum += probs[t] = std::exp((x[t] - max_x) / temperature);
  for (double& q : probs) q /= sum;
  const double top = *std::max_element(probs.begin(), probs.end());
  double kept = 0;
  for (double& q : probs) kept += q = q < min_p * top ? 0 : q;
  for (double& q : probs) q /= kept;
  return probs;
}

struct Row {
  std::vector<LogitEdit> edits;
  RowSamplingParams params;
};

Row MakeRow(const Processing& p, int vocab, float temperature, uint64_t seed = 1) {
  Row row;
  const SamplingOptions options = OptionsOf(p);
  EXPECT_TRUE(CheckLogitsProcessing(options, vocab, 1 << 20).ok());
  AppendLogitEdits(options, vocab, &row.edits);
  row.params.temperature = temperature;
  row.params.seed = seed;
  row.params.min_p = p.min_p;
  row.params.penalties = PenaltiesOf(options);
  row.params.edits = row.edits;
  return row;
}

int32_t Draw(const std::vector<float>& logits, const Row& row, uint64_t index, float* logprob) {
  RowSamplingParams params = row.params;
  params.sample_index = index;
  int32_t token = -1;
  SampleRow(logits, params, RowSampleOutput{.token_id = &token, .logprob = logprob});
  return token;
}

// Logits with many repeated values across a small vocabulary, and a prompt
// and output with repeated tokens, so every penalty changes the argmax.
std::vector<float> RandomLogits(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(rng);
  return logits;
}

TEST(LogitEditsTest, MergesOneEditPerTokenSortedById) {
  Processing p;
  p.repetition = 1.5f;
  p.frequency = 0.5f;
  p.bias = {{4, 2.0f}, {1, -1.0f}};
  p.banned = {4, 4};
  p.prompt = {1, 9, 1};
  p.output_counts = {{9, 3}, {2, 1}};
  std::vector<LogitEdit> edits;
  AppendLogitEdits(OptionsOf(p), 10, &edits);
  ASSERT_EQ(edits.size(), 4u);
  EXPECT_EQ(edits[0].token_id, 1);
  EXPECT_EQ(edits[0].bias, -1.0f);
  EXPECT_EQ(edits[0].flags, kLogitSeen);
  EXPECT_EQ(edits[1].token_id, 2);
  EXPECT_EQ(edits[1].output_count, 1);
  EXPECT_EQ(edits[2].token_id, 4);
  EXPECT_EQ(edits[2].flags, kLogitBanned);
  EXPECT_EQ(edits[3].token_id, 9);
  EXPECT_EQ(edits[3].output_count, 3);
  // Without penalties the counts are not edits.
  Processing bias_only;
  bias_only.bias = {{3, 1.0f}};
  bias_only.prompt = {5};
  bias_only.output_counts = {{6, 2}};
  edits.clear();
  AppendLogitEdits(OptionsOf(bias_only), 10, &edits);
  ASSERT_EQ(edits.size(), 1u);
  EXPECT_EQ(edits[0].token_id, 3);
}

TEST(LogitsProcessingTest, GreedyIsTheArgmaxOfTheReferenceForEachPenalty) {
  constexpr int kVocab = 257;
  std::vector<Processing> cases(6);
  cases[0].repetition = 1.8f;
  cases[1].frequency = 1.5f;
  cases[2].presence = 2.0f;
  cases[3].bias = {{3, 100.0f}, {7, -100.0f}, {11, 5.0f}};
  cases[4] = Processing{.presence = -0.5f, .frequency = 0.7f, .repetition = 0.6f};
  cases[4].bias = {{5, 3.0f}, {8, -2.0f}};
  cases[4].banned = {1};
  cases[5] = cases[4];
  cases[5].allowed = {2, 5, 8, 13, 21, 34, 55};
  int changed = 0;
  for (uint32_t seed = 0; seed < 60; ++seed) {
    const std::vector<float> logits = RandomLogits(kVocab, seed);
    for (Processing p : cases) {
      // Prompt and output repeat tokens, the raw top ones among them.
      const int top = static_cast<int>(std::max_element(logits.begin(), logits.end()) -
                                       logits.begin());
      p.prompt = {top, 3, 5, 3, top, 40};
      p.output_counts = {{top, 3}, {5, 2}, {8, 1}, {static_cast<int>(seed % kVocab), 4}};
      const std::vector<double> reference = ReferenceProcessed(logits, p);
      const int want = static_cast<int>(std::max_element(reference.begin(), reference.end()) -
                                        reference.begin());
      float logprob = 0;
      const int32_t got = Draw(logits, MakeRow(p, kVocab, 0.0f), 0, &logprob);
      EXPECT_EQ(got, want) << "seed " << seed;
      changed += got != top;
      // The logprob stays the raw one.
      double sum = 0;
      const double max_raw = logits[top];
      for (float x : logits) sum += std::exp(x - max_raw);
      EXPECT_NEAR(logprob, logits[got] - max_raw - std::log(sum), 1e-4);
    }
  }
  EXPECT_GT(changed, 100);  // The penalties really moved the choice.
}

TEST(LogitsProcessingTest, EveryTokenMaskedFallsBackToTheRawArgmax) {
  Processing p;
  p.allowed = {2};
  p.banned = {2};
  float logprob = 0;
  EXPECT_EQ(Draw({0.0f, 5.0f, 1.0f}, MakeRow(p, 3, 0.0f), 0, &logprob), 1);
  EXPECT_EQ(Draw({0.0f, 5.0f, 1.0f}, MakeRow(p, 3, 1.0f), 0, &logprob), 1);
}

TEST(LogitsProcessingTest, InPlaceLeavesTheProcessedRow) {
  Processing p;
  p.repetition = 2.0f;
  p.frequency = 1.0f;
  p.prompt = {0, 1};
  p.output_counts = {{1, 2}};
  p.bias = {{2, 1.0f}};
  const Row row = MakeRow(p, 4, 0.0f);
  std::vector<float> logits = {4.0f, -2.0f, 0.5f, 3.0f};
  int32_t token = -1;
  float logprob = 0;
  SampleRowInPlace(absl::MakeSpan(logits), row.params,
                   RowSampleOutput{.token_id = &token, .logprob = &logprob});
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -6.0f, 1.5f, 3.0f}));
  EXPECT_EQ(token, 3);
}

// Seeded draws with min_p and every penalty follow the reference's
// probabilities (chi-square, 99.9% quantile), over enough draws to see it.
TEST(LogitsProcessingTest, SampledDistributionMatchesTheReference) {
  constexpr int kVocab = 24;
  constexpr int kDraws = 40000;
  constexpr float kTemperature = 0.8f;
  Processing p{.presence = 0.4f, .frequency = 0.3f, .repetition = 1.3f, .min_p = 0.08f};
  p.bias = {{2, 1.5f}, {9, -1.0f}};
  p.banned = {4};
  p.prompt = {0, 1, 2, 3};
  p.output_counts = {{1, 2}, {5, 1}, {6, 3}};
  std::vector<float> logits(kVocab);
  for (int t = 0; t < kVocab; ++t) logits[t] = 1.5f * std::sin(0.7f * t) + 0.05f * t;
  const std::vector<double> probs =
      ReferenceProbabilities(ReferenceProcessed(logits, p), kTemperature, p.min_p);
  const Row row = MakeRow(p, kVocab, kTemperature, 12345);
  std::vector<int> counts(kVocab);
  for (int i = 0; i < kDraws; ++i) {
    float logprob = 0;
    ++counts[Draw(logits, row, static_cast<uint64_t>(i), &logprob)];
  }
  double chi = 0;
  int support = 0;
  for (int t = 0; t < kVocab; ++t) {
    if (probs[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " is cut by min_p or masked";
      continue;
    }
    ++support;
    const double want = probs[t] * kDraws;
    chi += (counts[t] - want) * (counts[t] - want) / want;
  }
  ASSERT_GE(support, 5);
  // 99.9% quantile of chi-square with up to 23 degrees of freedom.
  EXPECT_LT(chi, 49.7) << "support " << support;
}

// The worker's edge: FlattenStepPlan refuses every out-of-range field.
TEST(LogitsProcessingEdgeTest, FlattenStepPlanRefusesBadProcessing) {
  constexpr int kVocab = 10;
  auto plan_with = [](auto mutate) {
    StepPlan plan;
    SequenceStep* step = plan.add_sequences();
    step->set_seq_id(1);
    for (int t : {1, 2, 3}) step->add_token_ids(t);
    step->add_block_table(0);
    step->set_do_sample(true);
    mutate(*step->mutable_sampling());
    return plan;
  };
  const BatchLimits limits{.vocab_size = kVocab, .block_size = 4, .num_gpu_blocks = 2};
  auto expect_invalid = [&](const StepPlan& plan, const std::string& field) {
    auto batch = FlattenStepPlan(plan, limits);
    ASSERT_FALSE(batch.ok()) << field;
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(batch.status().message().find(field), std::string::npos) << batch.status();
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_invalid(plan_with([](auto& s) { s.set_presence_penalty(3); }), "presence_penalty");
  expect_invalid(plan_with([&](auto& s) { s.set_frequency_penalty(nan); }), "frequency_penalty");
  expect_invalid(plan_with([](auto& s) { s.set_repetition_penalty(0.001f); }),
                 "repetition_penalty");
  expect_invalid(plan_with([](auto& s) { s.set_repetition_penalty(3); }), "repetition_penalty");
  expect_invalid(plan_with([](auto& s) { s.set_min_p(2); }), "min_p");
  expect_invalid(plan_with([](auto& s) { s.add_logit_bias_token_ids(1); }), "logit_bias");
  expect_invalid(plan_with([](auto& s) {
                   s.add_logit_bias_token_ids(kVocab);
                   s.add_logit_bias_values(1);
                 }),
                 "logit_bias");
  expect_invalid(plan_with([](auto& s) {
                   s.add_logit_bias_token_ids(1);
                   s.add_logit_bias_values(101);
                 }),
                 "logit_bias");
  expect_invalid(plan_with([](auto& s) {
                   for (int i = 0; i < 2; ++i) {
                     s.add_logit_bias_token_ids(1);
                     s.add_logit_bias_values(1);
                   }
                 }),
                 "logit_bias");
  expect_invalid(plan_with([](auto& s) { s.add_allowed_token_ids(-1); }), "allowed_token_ids");
  expect_invalid(plan_with([](auto& s) { s.add_banned_token_ids(kVocab); }), "banned_token_ids");
  expect_invalid(plan_with([](auto& s) {
                   for (int i = 0; i <= kVocab; ++i) s.add_banned_token_ids(0);
                 }),
                 "banned_token_ids");
  expect_invalid(plan_with([](auto& s) { s.add_prompt_token_ids(kVocab); }), "prompt_token_ids");
  expect_invalid(plan_with([](auto& s) {
                   for (int i = 0; i < 4; ++i) s.add_prompt_token_ids(i);  // Context is 3.
                 }),
                 "prompt_token_ids");
  expect_invalid(plan_with([](auto& s) { s.add_output_token_ids(1); }), "output_token_ids");
  expect_invalid(plan_with([](auto& s) {
                   s.add_output_token_ids(1);
                   s.add_output_token_counts(0);
                 }),
                 "output_token_counts");
  expect_invalid(plan_with([](auto& s) {
                   s.add_output_token_ids(1);
                   s.add_output_token_counts(4);
                 }),
                 "output_token_counts");
  expect_invalid(plan_with([](auto& s) {
                   for (int i = 0; i < 2; ++i) {
                     s.add_output_token_ids(1);
                     s.add_output_token_counts(1);
                   }
                 }),
                 "output_token_ids");
  // A good one flattens into per-row edits.
  auto batch = FlattenStepPlan(plan_with([](auto& s) {
                                 s.set_presence_penalty(1);
                                 s.set_min_p(0.5f);
                                 s.add_output_token_ids(2);
                                 s.add_output_token_counts(3);
                               }),
                               limits);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->min_p, std::vector<float>{0.5f});
  EXPECT_EQ(batch->edit_offsets, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(batch->edits.size(), 1u);
  EXPECT_EQ(batch->edits[0].output_count, 3);
}

}  // namespace
}  // namespace pagoda::worker

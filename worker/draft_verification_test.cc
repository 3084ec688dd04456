// Speculative verification on the worker, without a model: the rule
// (CountAcceptedDrafts, VerifyRowOptions), FlattenStepPlan's rows and
// refusals for drafts, and the output distribution of the whole path
// (FlattenStepPlan, the CPU backend's Sample, AppendSampledTokens) over a
// synthetic bigram "model" against an exact float64 reference of plain
// sampling (chi-square per position).

#include "worker/draft_verification.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/speculation_limits.h"
#include "gtest/gtest.h"
#include "worker/flat_batch.h"
#include "worker/cpu/cpu_backend.h"
#include "tests/support/step_batch_test_util.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SamplingOptions;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

TEST(CountAcceptedDraftsTest, AcceptsThePrefixThatMatchesTheSampledRows) {
  const std::vector<int32_t> drafts = {4, 7, 9};
  EXPECT_EQ(CountAcceptedDrafts(drafts, std::vector<int32_t>{4, 7, 9, 1}), 3);  // Bonus: 1.
  EXPECT_EQ(CountAcceptedDrafts(drafts, std::vector<int32_t>{4, 8, 9, 1}), 1);  // Emits 8.
  EXPECT_EQ(CountAcceptedDrafts(drafts, std::vector<int32_t>{3, 7, 9, 1}), 0);  // Emits 3.
  // A match after a rejection does not count: the later rows' contexts
  // assumed the rejected draft.
  EXPECT_EQ(CountAcceptedDrafts(drafts, std::vector<int32_t>{4, 0, 9, 1}), 1);
  EXPECT_EQ(CountAcceptedDrafts({}, std::vector<int32_t>{5}), 0);
}

TEST(VerifyRowOptionsTest, CountsEarlierDraftsAsOutput) {
  SamplingOptions options;
  options.set_frequency_penalty(0.5f);
  options.add_output_token_ids(3);
  options.add_output_token_counts(2);
  const std::vector<int32_t> earlier = {3, 8, 8};
  const SamplingOptions row = VerifyRowOptions(options, earlier);
  ASSERT_EQ(row.output_token_ids_size(), 2);
  EXPECT_EQ(row.output_token_ids(0), 3);
  EXPECT_EQ(row.output_token_counts(0), 3);
  EXPECT_EQ(row.output_token_ids(1), 8);
  EXPECT_EQ(row.output_token_counts(1), 2);
  // Without a penalty that reads them, the counts are left as they are.
  options.set_frequency_penalty(0);
  EXPECT_EQ(VerifyRowOptions(options, earlier).output_token_ids_size(), 1);
}

constexpr int kBlockSize = 4;

SequenceStep DraftStep(std::vector<int> tokens, int start, std::vector<int> drafts) {
  SequenceStep step;
  step.set_seq_id(7);
  for (int t : tokens) step.add_token_ids(t);
  for (int d : drafts) step.add_draft_token_ids(d);
  step.set_start_position(start);
  for (int b = 0; b < 4; ++b) step.add_block_table(b);
  step.set_do_sample(true);
  step.set_sample_index(10);
  return step;
}

StepPlan PlanOf(const SequenceStep& step) {
  StepPlan plan;
  *plan.add_sequences() = step;
  return plan;
}

TEST(FlattenDraftsTest, DraftsAreQueryRowsThatEachGetALogitsRow) {
  SequenceStep step = DraftStep({5}, 6, {1, 2, 3});
  step.mutable_sampling()->set_presence_penalty(1.0f);
  const BatchLimits limits{.vocab_size = 10, .block_size = kBlockSize, .num_gpu_blocks = 4};
  auto batch = FlattenStepPlan(PlanOf(step), limits);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->input_ids, (std::vector<int32_t>{5, 1, 2, 3}));
  EXPECT_EQ(batch->positions, (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(batch->slot_mapping, (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(batch->context_lens, (std::vector<int32_t>{10}));
  EXPECT_EQ(batch->logits_indices, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(batch->sample_indices, (std::vector<uint64_t>{10, 11, 12, 13}));
  EXPECT_EQ(batch->sample_sequences, (std::vector<int32_t>{0, 0, 0, 0}));
  // Row j's penalties see drafts [0, j): one edit more per row here.
  EXPECT_EQ(batch->edit_offsets, (std::vector<int32_t>{0, 0, 1, 3, 6}));
  EXPECT_EQ(batch->edits[0].token_id, 1);
  EXPECT_EQ(batch->edits[0].output_count, 1);
}

TEST(FlattenDraftsTest, RefusesBadDrafts) {
  const BatchLimits limits{.vocab_size = 10, .block_size = kBlockSize, .num_gpu_blocks = 4};
  auto expect_refused = [&](const SequenceStep& step, const std::string& problem) {
    auto batch = FlattenStepPlan(PlanOf(step), limits);
    ASSERT_FALSE(batch.ok()) << problem;
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(batch.status().message().find(problem), std::string::npos) << batch.status();
  };
  expect_refused(DraftStep({5}, 0, std::vector<int>(kMaxSpeculativeTokens + 1, 1)), "at most 16");
  expect_refused(DraftStep({5}, 0, {1, 10}), "draft token id 10");
  expect_refused(DraftStep({5}, 0, {-1}), "draft token id -1");
  SequenceStep no_sample = DraftStep({5}, 0, {1});
  no_sample.set_do_sample(false);
  expect_refused(no_sample, "does not sample");
  SequenceStep masked = DraftStep({5}, 0, {1});
  masked.mutable_sampling()->set_token_mask(std::string(4, '\xff').substr(0, 4));
  expect_refused(masked, "draft_token_ids with a token_mask in the plan");
  // Masks that follow the plan come one per verified position.
  SequenceStep follows = DraftStep({5}, 0, {1});
  follows.set_token_mask_follows(true);
  auto reserved = FlattenStepPlan(PlanOf(follows), limits);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(reserved->pending_mask_rows, (std::vector<int32_t>{0, 1}));
  SequenceStep beams = DraftStep({5}, 0, {1});
  beams.mutable_sampling()->set_processed_logprobs(true);
  expect_refused(beams, "processed_logprobs");
  // Drafts count toward the blocks: 4 blocks hold 16 tokens, 15 + 2 do not fit.
  expect_refused(DraftStep({5}, 14, {1, 2}), "block_table has 4 blocks but 17 tokens");
  BatchLimits short_rope = limits;
  short_rope.max_positions = 8;
  auto batch = FlattenStepPlan(PlanOf(DraftStep({5}, 5, {1, 2, 3})), short_rope);
  EXPECT_FALSE(batch.ok());
  EXPECT_TRUE(FlattenStepPlan(PlanOf(DraftStep({5}, 5, {1, 2})), short_rope).ok());
}

// The synthetic target: a bigram table over a small vocabulary (the logits
// of the next token depend on the last one), with a frequency and presence
// penalty and a logit_bias on top, at temperature 1.
constexpr int kVocab = 6;
constexpr int kLength = 4;  // Output positions compared.
constexpr float kFrequency = 0.6f, kPresence = 0.3f, kBias = 0.8f;
constexpr int kBiased = 2;
constexpr int kPromptToken = 0;

float BigramLogit(int previous, int next) {
  return 1.7f * std::sin(1.3f * previous + 0.9f * next + 0.4f) + 0.3f * next;
}

// Plain sampling's distribution of each output position, exactly: every
// path of kLength tokens enumerated in double.
std::vector<std::vector<double>> ReferenceMarginals() {
  std::vector<std::vector<double>> marginal(kLength, std::vector<double>(kVocab, 0.0));
  std::function<void(std::vector<int>&, double)> walk = [&](std::vector<int>& path, double mass) {
    const int position = static_cast<int>(path.size());
    if (position == kLength) return;
    const int previous = path.empty() ? kPromptToken : path.back();
    std::vector<double> x(kVocab);
    double max_x = -INFINITY;
    for (int t = 0; t < kVocab; ++t) {
      const int count = static_cast<int>(std::count(path.begin(), path.end(), t));
      x[t] = static_cast<double>(BigramLogit(previous, t)) + (t == kBiased ? kBias : 0.0) -
             kFrequency * count - (count > 0 ? kPresence : 0.0);
      max_x = std::max(max_x, x[t]);
    }
    double sum = 0;
    for (double& v : x) sum += (v = std::exp(v - max_x));
    for (int t = 0; t < kVocab; ++t) {
      const double p = mass * x[t] / sum;
      marginal[position][t] += p;
      path.push_back(t);
      walk(path, p);
      path.pop_back();
    }
  };
  std::vector<int> path;
  walk(path, 1.0);
  return marginal;
}

// Generates kLength tokens for one seeded request through the worker's
// path, each step verifying the drafts `propose` gives (none: plain).
class SyntheticDecoder {
 public:
  SyntheticDecoder() : backend_(CreateCpuBackend(1)) {}

  std::vector<int> Decode(uint64_t seed,
                          const std::function<std::vector<int>(const std::vector<int>&)>& propose) {
    std::vector<int> output;
    while (static_cast<int>(output.size()) < kLength) {
      std::vector<int> drafts = propose(output);
      drafts.resize(std::min<size_t>(drafts.size(), kLength - output.size() - 1));
      const StepResult result = Step(seed, output, drafts);
      proposed_ += static_cast<int>(drafts.size());
      accepted_ += result.tokens(0).accepted_draft_ids_size();
      for (int32_t id : result.tokens(0).accepted_draft_ids()) output.push_back(id);
      output.push_back(result.tokens(0).token_id());
    }
    return output;
  }

 private:
  StepResult Step(uint64_t seed, const std::vector<int>& output, const std::vector<int>& drafts) {
    const int last = output.empty() ? kPromptToken : output.back();
    SequenceStep step = DraftStep({last}, static_cast<int>(output.size()), drafts);
    step.set_sample_index(static_cast<int>(output.size()));
    SamplingOptions& sampling = *step.mutable_sampling();
    sampling.set_temperature(1.0f);
    sampling.set_seed(seed);
    sampling.set_frequency_penalty(kFrequency);
    sampling.set_presence_penalty(kPresence);
    sampling.add_logit_bias_token_ids(kBiased);
    sampling.add_logit_bias_values(kBias);
    for (int t = 0; t < kVocab; ++t) {
      const int count = static_cast<int>(std::count(output.begin(), output.end(), t));
      if (count == 0) continue;
      sampling.add_output_token_ids(t);
      sampling.add_output_token_counts(count);
    }
    const StepPlan plan = PlanOf(step);
    auto batch = FlattenStepPlan(
        plan, BatchLimits{.vocab_size = kVocab, .block_size = kBlockSize, .num_gpu_blocks = 4});
    EXPECT_TRUE(batch.ok()) << batch.status();
    // The "model": row j's logits follow the token at its position.
    const int rows = batch->num_logits_rows();
    std::vector<float> logits(static_cast<size_t>(rows) * kVocab);
    for (int r = 0; r < rows; ++r) {
      const int input = batch->input_ids[batch->logits_indices[r]];
      for (int t = 0; t < kVocab; ++t) logits[r * kVocab + t] = BigramLogit(input, t);
    }
    auto buffer = backend_->Allocate(DType::kF32, logits.size());
    backend_->UploadBytes(logits.data(), buffer->raw(), logits.size() * sizeof(float));
    const UploadedStepBatch uploaded(backend_.get(), *batch);
    SampleResults samples;
    backend_->Sample(Tensor::Of(*buffer, {rows, kVocab}), uploaded.get().sampling, &samples);
    StepResult result;
    AppendSampledTokens(plan, *batch, samples, &result);
    return result;
  }

  std::unique_ptr<Backend> backend_;

 public:
  int proposed_ = 0, accepted_ = 0;  // Drafts, over every Decode.
};

// Pearson's statistic of `counts` against `probs` (every prob > 0 here).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int draws) {
  double chi = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    const double want = probs[t] * draws;
    chi += (counts[t] - want) * (counts[t] - want) / want;
  }
  return chi;
}

// Per-position counts of `draws` seeded requests decoded with `propose`,
// and the fraction of drafts accepted (in `acceptance`).
std::vector<std::vector<int>> PositionCounts(
    int draws, uint64_t first_seed,
    const std::function<std::vector<int>(uint64_t, const std::vector<int>&)>& propose,
    double* acceptance) {
  SyntheticDecoder decoder;
  std::vector<std::vector<int>> counts(kLength, std::vector<int>(kVocab, 0));
  for (int i = 0; i < draws; ++i) {
    const uint64_t seed = first_seed + i;
    const std::vector<int> tokens =
        decoder.Decode(seed, [&](const std::vector<int>& output) { return propose(seed, output); });
    for (int j = 0; j < kLength; ++j) ++counts[j][tokens[j]];
  }
  *acceptance = decoder.proposed_ == 0 ? 0.0 : 1.0 * decoder.accepted_ / decoder.proposed_;
  return counts;
}

// Drafts for the distribution test: half the requests guess the bigram's
// argmax chain (often right), half guess at random (mostly wrong), so both
// acceptance and rejection shape the output.
std::vector<int> MixedDrafts(uint64_t seed, const std::vector<int>& output) {
  std::mt19937_64 rng(seed * 7919 + output.size());
  std::vector<int> drafts;
  int previous = output.empty() ? kPromptToken : output.back();
  for (int j = 0; j < 3; ++j) {
    int next = 0;
    if (seed % 2 == 0) {
      for (int t = 1; t < kVocab; ++t) {
        if (BigramLogit(previous, t) > BigramLogit(previous, next)) next = t;
      }
    } else {
      next = static_cast<int>(rng() % kVocab);
    }
    drafts.push_back(next);
    previous = next;
  }
  return drafts;
}

// At temperature 1 with penalties and a bias, speculative outputs follow
// plain sampling's distribution at every position (Pearson chi-square, 5
// degrees of freedom, 99.99% quantile 25.74 per position); so do plain
// outputs, which shows the reference is plain sampling's.
TEST(DraftDistributionTest, SpeculativeOutputsFollowPlainSamplingsDistribution) {
  constexpr int kDraws = 6000;
  constexpr double kQuantile = 25.74;
  const auto reference = ReferenceMarginals();
  double acceptance = 0;
  const auto plain = PositionCounts(
      kDraws, 1000000, [](uint64_t, const std::vector<int>&) { return std::vector<int>(); },
      &acceptance);
  const auto speculative = PositionCounts(kDraws, 1, MixedDrafts, &acceptance);
  // Both branches of the rule shape the output.
  EXPECT_GT(acceptance, 0.2);
  EXPECT_LT(acceptance, 0.8);
  for (int j = 0; j < kLength; ++j) {
    EXPECT_LT(ChiSquare(plain[j], reference[j], kDraws), kQuantile) << "plain, position " << j;
    EXPECT_LT(ChiSquare(speculative[j], reference[j], kDraws), kQuantile)
        << "speculative, position " << j;
  }
}

// Seeded speculative decoding draws row j with sample_index + j, so its
// tokens are the very tokens plain decoding draws with the same seed,
// whatever the drafts.
TEST(DraftDistributionTest, SeededOutputsEqualPlainDecodingsWhateverTheDrafts) {
  SyntheticDecoder decoder;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const auto plain =
        decoder.Decode(seed, [](const std::vector<int>&) { return std::vector<int>(); });
    const auto mixed =
        decoder.Decode(seed, [&](const std::vector<int>& out) { return MixedDrafts(seed, out); });
    EXPECT_EQ(mixed, plain) << "seed " << seed;
  }
}

}  // namespace
}  // namespace pagoda::worker

// The host sampler: the one rule shared with kernels/ops/sampling.h (greedy,
// top-k and top-p with boundary ties kept, a Gumbel-max draw keyed by
// Philox4x32-10 on (seed, sample_index) counted by token id), its
// distribution, and the raw log-softmax logprobs.

#include "worker/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops/philox.h"

namespace pagoda::worker {
namespace {

struct Sampled {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

RowSamplingParams Params(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 0,
                         int num_logprobs = 0) {
  return RowSamplingParams{.temperature = temperature,
                           .top_k = top_k,
                           .top_p = top_p,
                           .seed = seed,
                           .sample_index = 0,
                           .num_logprobs = num_logprobs};
}

Sampled Sample(const std::vector<float>& logits, RowSamplingParams params, uint64_t index) {
  params.sample_index = index;
  Sampled out;
  const int count = std::min<int>(params.num_logprobs, static_cast<int>(logits.size()));
  out.top_ids.assign(count, -1);
  out.top_logprobs.assign(count, 0.0f);
  SampleRow(logits, params,
            RowSampleOutput{.token_id = &out.token,
                            .logprob = &out.logprob,
                            .top_ids = absl::MakeSpan(out.top_ids),
                            .top_logprobs = absl::MakeSpan(out.top_logprobs)});
  return out;
}

int32_t Token(const std::vector<float>& logits, const RowSamplingParams& params,
              uint64_t index = 0) {
  return Sample(logits, params, index).token;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p) + 3.0));
  return logits;
}

// In float64, NaN as -inf, added in token order.
std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  auto value = [](float x) { return std::isnan(x) ? -INFINITY : static_cast<double>(x); };
  double max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max(max_logit, value(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(value(x) - max_logit);
  std::vector<double> out;
  for (float x : logits) out.push_back(value(x) - max_logit - std::log(sum));
  return out;
}

// Whether `got` is `want` rounded to float, or, where `want` lies within
// 1e-12 (relative) of the midpoint between two floats, either of them: what
// a float64 log-sum-exp whose terms are each within 1 float64 ulp, added in
// another order, may give.
bool IsFloatRoundingOf(float got, double want) {
  if (!std::isfinite(want)) return got == want;
  const double spacing = std::nextafter(std::abs(got), INFINITY) - std::abs(got);
  return std::abs(got - want) <= 0.5 * spacing + 1e-12 * std::abs(want);
}

// Counts of each token over `draws` samples: sample_index 0..draws-1 under
// one seed, or (for `vary_seed`) seeds 1..draws at index 0.
std::map<int, int> Histogram(const std::vector<float>& logits, RowSamplingParams params, int draws,
                             bool vary_seed = false) {
  std::map<int, int> counts;
  for (int i = 0; i < draws; ++i) {
    if (vary_seed) params.seed = static_cast<uint64_t>(i) + 1;
    ++counts[Token(logits, params, vary_seed ? 0 : i)];
  }
  return counts;
}

std::set<int> Drawn(const std::vector<float>& logits, const RowSamplingParams& params, int draws) {
  std::set<int> tokens;
  for (const auto& [token, count] : Histogram(logits, params, draws)) tokens.insert(token);
  return tokens;
}

// Pearson chi-square of `counts` against `expected` probabilities.
double ChiSquare(const std::map<int, int>& counts, const std::vector<double>& expected, int draws) {
  double chi = 0.0;
  for (size_t id = 0; id < expected.size(); ++id) {
    const double want = expected[id] * draws;
    const auto it = counts.find(static_cast<int>(id));
    const double got = it == counts.end() ? 0 : it->second;
    if (want == 0) {
      EXPECT_EQ(got, 0) << "token " << id << " has probability 0";
      continue;
    }
    chi += (got - want) * (got - want) / want;
  }
  return chi;
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTiesAndNanIsMinusInfinity) {
  EXPECT_EQ(Token({0.1f, 2.0f, -1.0f, 1.9f}, Params(0.0f)), 1);
  EXPECT_EQ(Token({1.0f, 3.0f, 3.0f, 3.0f}, Params(0.0f), 5), 1);
  EXPECT_EQ(Token({4.0f, 4.0f}, Params(5e-6f, 0, 1.0f, 77), 9), 0);
  EXPECT_EQ(Token({NAN, -1.0f, 0.5f}, Params(0.0f)), 2);
  // A row long enough for the argmax's interleaved scans: ties across
  // scans and past them, -0 against +0, a row of NaN.
  std::vector<float> row(1003);
  for (size_t i = 0; i < row.size(); ++i) row[i] = std::sin(static_cast<float>(i));
  for (int id : {1002, 700, 302, 301}) row[id] = 9.0f;
  EXPECT_EQ(Token(row, Params(0.0f)), 301);
  std::fill(row.begin(), row.end(), -INFINITY);
  row[13] = -0.0f;
  row[10] = 0.0f;
  row[1001] = 0.0f;
  EXPECT_EQ(Token(row, Params(0.0f)), 10);
  std::fill(row.begin(), row.end(), NAN);
  EXPECT_EQ(Token(row, Params(0.0f)), 0);
  // NaN never wins a draw either.
  for (uint64_t index = 0; index < 50; ++index) {
    EXPECT_EQ(Token({NAN, 0.0f, NAN}, Params(1.0f, 0, 1.0f, 3), index), 1);
  }
}

// The draw is exactly the CUDA kernel's: the argmax over tokens of
// (x - max) / T + Gumbel(u_i), u_i = UniformOpen01 of lane i % 4 of Philox
// block i / 4 of stream (seed, sample_index). Recomputed here in double; the
// logits are spread so no two scores are within rounding of each other.
// The Gumbel-max token recomputed in double over every token (no pruning),
// or -1 when the two best scores are within float rounding of each other.
int ReferenceGumbelMax(const std::vector<float>& logits, float temperature, uint64_t seed,
                       uint64_t index) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double best = -INFINITY, runner_up = -INFINITY;
  int best_id = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const auto draws = kernels::PhiloxDraws(seed, index, i / 4);
    const double u = kernels::UniformOpen01(draws.v[i % 4]);
    const double score = (logits[i] - max_logit) / temperature - std::log(-std::log(u));
    if (score > best) {
      runner_up = best;
      best = score;
      best_id = static_cast<int>(i);
    } else {
      runner_up = std::max(runner_up, score);
    }
  }
  return best - runner_up < 1e-4 * std::max(1.0, std::abs(best)) ? -1 : best_id;
}

// The draw is exactly the CUDA kernel's: the argmax over tokens of
// (x - max) / T + Gumbel(u_i), u_i = UniformOpen01 of lane i % 4 of Philox
// block i / 4 of stream (seed, sample_index). On a small row of close logits
// and on a large spread row, where the sampler skips the tokens that cannot
// win, both against the plain recomputation.
TEST(SamplerTest, DrawIsGumbelMaxOverPhiloxCountedByTokenId) {
  std::vector<float> spread(5003);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (float& x : spread) x = normal(rng);
  const std::vector<std::pair<std::vector<float>, float>> rows = {
      {{0.3f, -0.7f, 1.1f, 0.9f, 0.0f, 1.4f, -2.0f, 0.6f, 0.25f}, 0.8f},
      {spread, 1.0f},
      {spread, 2.5f}};
  int checked = 0;
  for (const auto& [logits, temperature] : rows) {
    for (uint64_t seed : {1ull, 99ull, 0xdeadbeefcafeull}) {
      for (uint64_t index = 0; index < 40; ++index) {
        const int want = ReferenceGumbelMax(logits, temperature, seed, index);
        if (want < 0) continue;  // A near-tie: float may order it either way.
        EXPECT_EQ(Token(logits, Params(temperature, 0, 1.0f, seed), index), want)
            << "vocab " << logits.size() << " T " << temperature << " seed " << seed << " index "
            << index;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(SamplerTest, SameSeedAndIndexGiveSameTokenOtherIndexesVary) {
  const std::vector<float> logits = LogitsFor({0.2, 0.2, 0.2, 0.2, 0.2});
  const RowSamplingParams params = Params(1.0f, 0, 1.0f, 1234);
  std::set<int> seen;
  for (int index = 0; index < 50; ++index) {
    const int first = Token(logits, params, index);
    EXPECT_EQ(Token(logits, params, index), first);
    seen.insert(first);
  }
  EXPECT_EQ(seen.size(), 5u);  // 50 uniform draws over 5 tokens hit all (fixed seed).
  // Another seed gives a different sequence of draws.
  int differing = 0;
  for (int index = 0; index < 50; ++index) {
    differing += Token(logits, params, index) != Token(logits, Params(1.0f, 0, 1.0f, 1235), index);
  }
  EXPECT_GT(differing, 20);
}

TEST(SamplerTest, TopKNeverLeavesTheTopKAndKeepsTiesAtTheKth) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.9f, 1.8f, -3.0f};
  for (uint64_t seed : {1u, 2u, 3u}) {
    EXPECT_EQ(Drawn(logits, Params(2.0f, 3, 1.0f, seed), 3000), (std::set<int>{1, 5, 3}));
  }
  // top_k = 1 is greedy whatever the temperature.
  EXPECT_EQ(Drawn(logits, Params(10.0f, 1, 1.0f, 9), 200), (std::set<int>{1}));
  // Two tokens tie at the 2nd largest logit: top_k = 2 keeps all three.
  const std::vector<float> tied = {1.0f, 3.0f, 2.0f, 2.0f, 0.0f};
  EXPECT_EQ(Drawn(tied, Params(1.0f, 2, 1.0f, 4), 3000), (std::set<int>{1, 2, 3}));
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingPWithBoundaryTies) {
  const std::vector<float> logits = LogitsFor({0.05, 0.5, 0.15, 0.3});
  EXPECT_EQ(Drawn(logits, Params(1.0f, 0, 0.45f, 11), 4000), (std::set<int>{1}));
  EXPECT_EQ(Drawn(logits, Params(1.0f, 0, 0.75f, 11), 4000), (std::set<int>{1, 3}));
  EXPECT_EQ(Drawn(logits, Params(1.0f, 0, 0.9f, 11), 4000), (std::set<int>{1, 3, 2}));
  EXPECT_EQ(Drawn(logits, Params(1.0f, 0, 0.99f, 11), 4000), (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(Drawn(logits, Params(1.0f, 0, 1e-6f, 11), 4000), (std::set<int>{1}));  // >= 1 token.
  // Masses e^2 : e : e : 1. Token 0 holds 0.53; 0.6 is reached inside the
  // tie at logit 1, so both tied tokens stay.
  const std::vector<float> tied = {2.0f, 1.0f, 1.0f, 0.0f};
  EXPECT_EQ(Drawn(tied, Params(1.0f, 0, 0.6f, 8), 4000), (std::set<int>{0, 1, 2}));
}

TEST(SamplerTest, TopPRenormalisesOverTheTopKSurvivors) {
  const std::vector<float> logits = LogitsFor({0.4, 0.3, 0.2, 0.1});
  // Alone, top_p 0.55 needs tokens 0 and 1 (0.4 < 0.55 <= 0.7).
  EXPECT_EQ(Drawn(logits, Params(1.0f, 0, 0.55f, 6), 3000), (std::set<int>{0, 1}));
  // After top_k = 2, token 0 holds 0.4 / 0.7 = 0.57 >= 0.55 of the mass.
  EXPECT_EQ(Drawn(logits, Params(1.0f, 2, 0.55f, 6), 3000), (std::set<int>{0}));
}

TEST(SamplerTest, SampledDistributionPassesChiSquare) {
  // Critical values of chi-square at p = 0.001.
  constexpr double kCritical3 = 16.266;  // 3 degrees of freedom.
  constexpr double kCritical4 = 18.467;  // 4 degrees of freedom.
  const std::vector<double> probs = {0.1, 0.4, 0.05, 0.25, 0.2};
  const std::vector<float> logits = LogitsFor(probs);
  const int draws = 20000;
  // Over sample indexes of one seed, and over seeds at one index.
  EXPECT_LT(ChiSquare(Histogram(logits, Params(1.0f, 0, 1.0f, 2024), draws), probs, draws),
            kCritical4);
  EXPECT_LT(ChiSquare(Histogram(logits, Params(1.0f), draws, /*vary_seed=*/true), probs, draws),
            kCritical4);

  // Temperature 0.5 squares the probabilities (then renormalises).
  std::vector<double> sharpened;
  double total = 0.0;
  for (double p : probs) total += p * p;
  for (double p : probs) sharpened.push_back(p * p / total);
  EXPECT_LT(ChiSquare(Histogram(logits, Params(0.5f, 0, 1.0f, 7), draws), sharpened, draws),
            kCritical4);

  // top_k = 4 drops token 2 and renormalises the rest.
  std::vector<double> truncated = probs;
  truncated[2] = 0.0;
  for (double& p : truncated) p /= 0.95;
  EXPECT_LT(ChiSquare(Histogram(logits, Params(1.0f, 4, 1.0f, 99), draws), truncated, draws),
            kCritical3);

  // top_p = 0.8 keeps 0.4 + 0.25 + 0.2 = 0.85 (tokens 1, 3, 4), renormalised.
  std::vector<double> nucleus = {0.0, 0.4 / 0.85, 0.0, 0.25 / 0.85, 0.2 / 0.85};
  constexpr double kCritical2 = 13.816;  // 2 degrees of freedom.
  EXPECT_LT(ChiSquare(Histogram(logits, Params(1.0f, 0, 0.8f, 31), draws), nucleus, draws),
            kCritical2);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxWithTopDescending) {
  const std::vector<float> logits = {0.3f, -1.2f, 2.5f, 2.5f, 0.0f, 1.1f};
  const std::vector<double> expected = LogSoftmax(logits);
  // Temperature and top-k do not change the reported logprobs.
  for (const RowSamplingParams& params :
       {Params(0.0f, 0, 1.0f, 0, 4), Params(0.3f, 2, 0.5f, 5, 4)}) {
    const Sampled token = Sample(logits, params, 3);
    EXPECT_NEAR(token.logprob, expected[token.token], 1e-6);
    ASSERT_EQ(token.top_ids.size(), 4u);
    const std::vector<int> order = {2, 3, 5, 0};  // Tie 2/3: lower id first.
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(token.top_ids[i], order[i]);
      EXPECT_NEAR(token.top_logprobs[i], expected[order[i]], 1e-6);
    }
  }
  // More requested than the vocabulary has: all of it.
  const Sampled all = Sample(logits, Params(0.0f, 0, 1.0f, 0, 20), 0);
  EXPECT_EQ(all.top_ids, (std::vector<int32_t>{2, 3, 5, 0, 4, 1}));
}

// A Llama-3-sized vocabulary (plus one, for the vector loops' tails), with
// -inf and NaN logits among N(0, 4) ones: every logprob, raw or processed,
// greedy or drawn, is the float64 log-softmax rounded once to float.
TEST(SamplerTest, LogprobsOfALargeVocabularyAreTheFloat64ReferenceRounded) {
  constexpr int kVocab = 128257;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(kVocab);
  for (int i = 0; i < kVocab; ++i) {
    logits[i] = i % 1001 == 7 ? -INFINITY : i % 997 == 3 ? NAN : normal(rng);
  }
  const std::vector<double> raw = LogSoftmax(logits);
  auto expect_rounded = [](const Sampled& got, const std::vector<double>& want, const char* what) {
    EXPECT_TRUE(IsFloatRoundingOf(got.logprob, want[got.token]))
        << what << ": " << got.logprob << " against " << want[got.token];
    for (size_t i = 0; i < got.top_ids.size(); ++i) {
      EXPECT_TRUE(IsFloatRoundingOf(got.top_logprobs[i], want[got.top_ids[i]]))
          << what << " top " << i << ": " << got.top_logprobs[i] << " against "
          << want[got.top_ids[i]];
    }
  };
  expect_rounded(Sample(logits, Params(0.0f, 0, 1.0f, 0, 8), 0), raw, "greedy");
  for (uint64_t index = 0; index < 4; ++index) {
    expect_rounded(Sample(logits, Params(1.0f, 0, 1.0f, 17, 3), index), raw, "drawn");
  }
  // Edits (penalties, bias) take the in-place path; the logprobs stay raw.
  const LogitEdit edits[] = {{.token_id = 11, .bias = 30.0f},
                             {.token_id = 5000, .output_count = 2, .flags = kLogitSeen},
                             {.token_id = 90001, .flags = kLogitBanned}};
  RowSamplingParams edited = Params(0.0f, 0, 1.0f, 0, 4);
  edited.edits = edits;
  edited.penalties = LogitPenalties{.repetition = 1.3f, .frequency = 0.5f};
  const Sampled biased = Sample(logits, edited, 0);
  EXPECT_EQ(biased.token, 11);
  expect_rounded(biased, raw, "edited");
  const LogitEdit allowed[] = {{.token_id = 11, .flags = kLogitAllowed},
                               {.token_id = 5000, .flags = kLogitAllowed}};
  RowSamplingParams allowed_only = Params(1.0f, 0, 1.0f, 3, 2);
  allowed_only.edits = allowed;
  allowed_only.penalties.allowed_only = true;
  const Sampled within = Sample(logits, allowed_only, 0);
  EXPECT_TRUE(within.token == 11 || within.token == 5000) << within.token;
  expect_rounded(within, raw, "allowed only");
  // Beam search over a mask of every third token: the logprobs of the
  // processed (masked) row.
  std::vector<uint32_t> mask((kVocab + 31) / 32, 0);
  std::vector<float> masked(kVocab, -INFINITY);
  for (int i = 0; i < kVocab; i += 3) {
    mask[i / 32] |= 1u << (i % 32);
    masked[i] = logits[i];
  }
  RowSamplingParams beam = Params(0.0f, 0, 1.0f, 0, 6);
  beam.token_mask = mask;
  beam.processed_logprobs = true;
  expect_rounded(Sample(logits, beam, 0), LogSoftmax(masked), "processed");
}

TEST(SamplerTest, TokenMaskLimitsTheDrawButNotTheLogprobs) {
  // Token 0 is the most likely; the mask allows 3 and 5 only.
  const std::vector<float> logits = {5.0f, 1.0f, 0.5f, 0.2f, 2.0f, 0.1f, -1.0f};
  const std::vector<uint32_t> mask = {(1u << 3) | (1u << 5)};
  RowSamplingParams greedy = Params(0.0f, 0, 1.0f, 0, 2);
  greedy.token_mask = mask;
  const Sampled best = Sample(logits, greedy, 0);
  EXPECT_EQ(best.token, 3);
  EXPECT_EQ(best.top_ids[0], 0);  // Logprobs stay those of the raw logits.
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x));
  EXPECT_NEAR(best.logprob, 0.2 - std::log(sum), 1e-5);
  RowSamplingParams sampled = Params(1.0f, 0, 1.0f, 42);
  sampled.token_mask = mask;
  std::set<int32_t> seen;
  for (uint64_t index = 0; index < 200; ++index) seen.insert(Token(logits, sampled, index));
  EXPECT_EQ(seen, (std::set<int32_t>{3, 5}));
  // With a penalty edit on a masked token, the mask still wins.
  const LogitEdit edit{.token_id = 0, .output_count = 0, .bias = 50.0f, .flags = 0};
  sampled.edits = absl::MakeConstSpan(&edit, 1);
  for (uint64_t index = 0; index < 50; ++index) EXPECT_NE(Token(logits, sampled, index), 0);
}

TEST(SamplerTest, ProcessedLogprobsRenormaliseOverTheMaskAndTheEdits) {
  // Beam search: the mask allows 1, 3, 4 and 5; token 4 is banned; 5 gets
  // a bias of +1. The logprobs are log_softmax over {1, 3, 5 + 1}, the rest
  // -inf, whatever the raw logits of the refused tokens.
  const std::vector<float> logits = {5.0f, 1.0f, 0.5f, 0.2f, 2.0f, 0.1f, -1.0f};
  const std::vector<uint32_t> mask = {(1u << 1) | (1u << 3) | (1u << 4) | (1u << 5)};
  const LogitEdit edits[] = {{.token_id = 4, .flags = kLogitBanned}, {.token_id = 5, .bias = 1.0f}};
  RowSamplingParams params = Params(0.0f, 0, 1.0f, 0, 5);
  params.token_mask = mask;
  params.edits = edits;
  params.processed_logprobs = true;
  const double normalizer = std::log(std::exp(1.0) + std::exp(0.2) + std::exp(1.1));
  const Sampled best = Sample(logits, params, 0);
  EXPECT_EQ(best.token, 5);
  EXPECT_NEAR(best.logprob, 1.1 - normalizer, 1e-6);
  EXPECT_EQ(best.top_ids, (std::vector<int32_t>{5, 1, 3, 0, 2}));  // -inf ties: lower id first.
  EXPECT_NEAR(best.top_logprobs[0], 1.1 - normalizer, 1e-6);
  EXPECT_NEAR(best.top_logprobs[1], 1.0 - normalizer, 1e-6);
  EXPECT_NEAR(best.top_logprobs[2], 0.2 - normalizer, 1e-6);
  EXPECT_EQ(best.top_logprobs[3], -INFINITY);
  EXPECT_EQ(best.top_logprobs[4], -INFINITY);
  // One allowed token: log 1.
  const std::vector<uint32_t> one = {1u << 2};
  params.token_mask = one;
  const Sampled forced = Sample(logits, params, 0);
  EXPECT_EQ(forced.token, 2);
  EXPECT_EQ(forced.logprob, 0.0f);
  EXPECT_EQ(forced.top_logprobs[0], 0.0f);
  // Without edits or a mask the processed logits are the raw ones.
  RowSamplingParams plain = Params(0.0f, 0, 1.0f, 0, 2);
  plain.processed_logprobs = true;
  const std::vector<double> expected = LogSoftmax(logits);
  EXPECT_NEAR(Sample(logits, plain, 0).logprob, expected[0], 1e-6);
}

}  // namespace
}  // namespace pagoda::worker

#include "worker/sampler.h"

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SamplingOptions;

SamplingOptions Options(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 0,
                        int num_logprobs = 0) {
  SamplingOptions options;
  options.set_temperature(temperature);
  options.set_top_k(top_k);
  options.set_top_p(top_p);
  options.set_seed(seed);
  options.set_num_logprobs(num_logprobs);
  return options;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p) + 3.0));
  return logits;
}

std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  double max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max<double>(max_logit, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(x - max_logit);
  std::vector<double> out;
  for (float x : logits) out.push_back(x - max_logit - std::log(sum));
  return out;
}

// Counts of each token over `draws` samples (sample_index 0..draws-1).
std::map<int, int> Histogram(const std::vector<float>& logits, const SamplingOptions& options,
                             int draws) {
  std::map<int, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[SampleToken(logits, options, i).token_id()];
  return counts;
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

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  EXPECT_EQ(SampleToken({0.1f, 2.0f, -1.0f, 1.9f}, Options(0.0f), 0).token_id(), 1);
  EXPECT_EQ(SampleToken({1.0f, 3.0f, 3.0f, 3.0f}, Options(0.0f), 5).token_id(), 1);
  EXPECT_EQ(SampleToken({4.0f, 4.0f}, Options(5e-6f, 0, 1.0f, 77), 9).token_id(), 0);
}

TEST(SamplerTest, SameSeedAndIndexGiveSameTokenOtherIndexesVary) {
  const std::vector<float> logits = LogitsFor({0.2, 0.2, 0.2, 0.2, 0.2});
  const SamplingOptions options = Options(1.0f, 0, 1.0f, 1234);
  std::set<int> seen;
  for (int index = 0; index < 50; ++index) {
    const int first = SampleToken(logits, options, index).token_id();
    EXPECT_EQ(SampleToken(logits, options, index).token_id(), first);
    seen.insert(first);
  }
  EXPECT_EQ(seen.size(), 5u);  // 50 uniform draws over 5 tokens hit all (fixed seed).
  // Another seed gives a different sequence of draws.
  int differing = 0;
  for (int index = 0; index < 50; ++index) {
    differing += SampleToken(logits, options, index).token_id() !=
                 SampleToken(logits, Options(1.0f, 0, 1.0f, 1235), index).token_id();
  }
  EXPECT_GT(differing, 20);
}

TEST(SamplerTest, UniformIsInUnitIntervalAndCentred) {
  double sum = 0.0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = UniformForSample(42, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NE(UniformForSample(1, 0), UniformForSample(0, 1));
}

TEST(SamplerTest, TopKNeverLeavesTheTopK) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.9f, 1.8f, -3.0f};
  const std::set<int> top3 = {1, 5, 3};
  for (uint64_t seed : {1u, 2u, 3u}) {
    const auto counts = Histogram(logits, Options(2.0f, 3, 1.0f, seed), 3000);
    std::set<int> drawn;
    for (const auto& [token, count] : counts) drawn.insert(token);
    EXPECT_EQ(drawn, top3);
  }
  // top_k = 1 is greedy whatever the temperature.
  EXPECT_EQ(Histogram(logits, Options(10.0f, 1, 1.0f, 9), 200).size(), 1u);
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingP) {
  const std::vector<float> logits = LogitsFor({0.05, 0.5, 0.15, 0.3});
  auto drawn = [&](float top_p) {
    std::set<int> tokens;
    for (const auto& [token, count] : Histogram(logits, Options(1.0f, 0, top_p, 11), 4000)) {
      tokens.insert(token);
    }
    return tokens;
  };
  EXPECT_EQ(drawn(0.45f), (std::set<int>{1}));
  EXPECT_EQ(drawn(0.75f), (std::set<int>{1, 3}));
  EXPECT_EQ(drawn(0.9f), (std::set<int>{1, 3, 2}));
  EXPECT_EQ(drawn(0.99f), (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(drawn(1e-6f), (std::set<int>{1}));  // Always at least one token.
}

TEST(SamplerTest, SampledDistributionPassesChiSquare) {
  // Critical values of chi-square at p = 0.001.
  constexpr double kCritical3 = 16.266;  // 3 degrees of freedom.
  constexpr double kCritical4 = 18.467;  // 4 degrees of freedom.
  const std::vector<double> probs = {0.1, 0.4, 0.05, 0.25, 0.2};
  const std::vector<float> logits = LogitsFor(probs);
  const int draws = 20000;
  EXPECT_LT(ChiSquare(Histogram(logits, Options(1.0f, 0, 1.0f, 2024), draws), probs, draws),
            kCritical4);

  // Temperature 0.5 squares the probabilities (then renormalises).
  std::vector<double> sharpened;
  double total = 0.0;
  for (double p : probs) total += p * p;
  for (double p : probs) sharpened.push_back(p * p / total);
  EXPECT_LT(ChiSquare(Histogram(logits, Options(0.5f, 0, 1.0f, 7), draws), sharpened, draws),
            kCritical4);

  // top_k = 4 drops token 2 and renormalises the rest.
  std::vector<double> truncated = probs;
  truncated[2] = 0.0;
  for (double& p : truncated) p /= 0.95;
  EXPECT_LT(ChiSquare(Histogram(logits, Options(1.0f, 4, 1.0f, 99), draws), truncated, draws),
            kCritical3);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxWithTopDescending) {
  const std::vector<float> logits = {0.3f, -1.2f, 2.5f, 2.5f, 0.0f, 1.1f};
  const std::vector<double> expected = LogSoftmax(logits);
  // Temperature and top-k do not change the reported logprobs.
  for (const SamplingOptions& options :
       {Options(0.0f, 0, 1.0f, 0, 4), Options(0.3f, 2, 0.5f, 5, 4)}) {
    const auto token = SampleToken(logits, options, 3);
    EXPECT_NEAR(token.logprob(), expected[token.token_id()], 1e-6);
    ASSERT_EQ(token.top_size(), 4);
    const std::vector<int> order = {2, 3, 5, 0};  // Tie 2/3: lower id first.
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(token.top(i).token_id(), order[i]);
      EXPECT_NEAR(token.top(i).logprob(), expected[order[i]], 1e-6);
    }
  }
  EXPECT_EQ(SampleToken(logits, Options(0.0f), 0).top_size(), 0);
  // More requested than the vocabulary has: all of it.
  EXPECT_EQ(SampleToken(logits, Options(0.0f, 0, 1.0f, 0, 20), 0).top_size(), 6);
}

}  // namespace
}  // namespace pagoda::worker

// Token sampling: greedy exactness, determinism, batch independence, the
// top-k / top-p candidate sets, log-probabilities, and a chi-square test of
// the drawn distribution.

#include "kernels/ops/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RandomFloats;

struct Row {
  std::vector<float> logits;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  uint64_t sample_index = 0;
};

struct RowResult {
  int32_t id;
  float logprob;
  int32_t candidates;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// Runs one launch over `rows` (all of one vocab size).
std::vector<RowResult> Sample(const std::vector<Row>& rows, int num_logprobs = 0) {
  const int n = rows.size();
  const int vocab = rows[0].logits.size();
  std::vector<float> logits, temperatures;
  std::vector<int32_t> top_k;
  std::vector<float> top_p;
  std::vector<uint64_t> seeds, indices;
  for (const Row& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    temperatures.push_back(r.temperature);
    top_k.push_back(r.top_k);
    top_p.push_back(r.top_p);
    seeds.push_back(r.seed);
    indices.push_back(r.sample_index);
  }
  DeviceBuffer d_logits(logits.size() * 4), d_t(n * 4), d_k(n * 4), d_p(n * 4), d_s(n * 8),
      d_i(n * 8), d_ids(n * 4), d_lp(n * 4), d_c(n * 4),
      d_top_ids(std::max(1, n * num_logprobs) * 4), d_top_lp(std::max(1, n * num_logprobs) * 4);
  d_logits.Upload(logits);
  d_t.Upload(temperatures);
  d_k.Upload(top_k);
  d_p.Upload(top_p);
  d_s.Upload(seeds);
  d_i.Upload(indices);
  d_ids.Fill(0xFF);
  TokenSamplingParams p;
  p.logits = d_logits.as<float>();
  p.logits_stride = vocab;
  p.num_rows = n;
  p.vocab_size = vocab;
  p.temperatures = d_t.as<float>();
  p.top_k = d_k.as<int32_t>();
  p.top_p = d_p.as<float>();
  p.seeds = d_s.as<uint64_t>();
  p.sample_indices = d_i.as<uint64_t>();
  p.num_logprobs = num_logprobs;
  p.sampled_ids = d_ids.as<int32_t>();
  p.sampled_logprobs = d_lp.as<float>();
  p.top_ids = d_top_ids.as<int32_t>();
  p.top_logprobs = d_top_lp.as<float>();
  p.num_candidates = d_c.as<int32_t>();
  EXPECT_EQ(LaunchTokenSampling(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto ids = d_ids.Download<int32_t>(n);
  const auto lps = d_lp.Download<float>(n);
  const auto cands = d_c.Download<int32_t>(n);
  const auto top_ids = d_top_ids.Download<int32_t>(n * num_logprobs);
  const auto top_lps = d_top_lp.Download<float>(n * num_logprobs);
  std::vector<RowResult> out(n);
  for (int r = 0; r < n; ++r) {
    out[r] = {ids[r], lps[r], cands[r],
              std::vector<int32_t>(top_ids.begin() + r * num_logprobs,
                                   top_ids.begin() + (r + 1) * num_logprobs),
              std::vector<float>(top_lps.begin() + r * num_logprobs,
                                 top_lps.begin() + (r + 1) * num_logprobs)};
  }
  return out;
}

double LogSumExp(const std::vector<float>& logits) {
  const double m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - m);
  return m + std::log(sum);
}

// Ids sorted by logit descending, lowest id first among equals.
std::vector<int> RankByLogit(const std::vector<float>& logits) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  return order;
}

TEST(SamplingTest, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<Row> rows;
  for (const int vocab : {1, 5, 4097}) {
    for (int trial = 0; trial < 3; ++trial) {
      Row r;
      r.logits = RandomFloats(vocab, -5, 5, vocab * 10 + trial);
      r.temperature = 0.0f;
      rows.push_back(r);
    }
  }
  // Ties: the same maximum at ids 7, 300 and 4000.
  Row tie;
  tie.logits = RandomFloats(4097, -5, 5, 99);
  tie.logits[4000] = tie.logits[300] = tie.logits[7] = 9.0f;
  tie.temperature = 0.0f;
  rows.push_back(tie);
  for (const Row& r : rows) {
    const std::vector<Row> one = {r};
    const RowResult got = Sample(one, 0)[0];
    const int want = RankByLogit(r.logits)[0];
    EXPECT_EQ(got.id, want);
    EXPECT_NEAR(got.logprob, r.logits[want] - LogSumExp(r.logits), 1e-4);
  }
}

TEST(SamplingTest, SameSeedSameTokenAndRowsIndependentOfBatch) {
  const int vocab = 32000;
  std::vector<Row> rows;
  for (int i = 0; i < 37; ++i) {
    Row r;
    r.logits = RandomFloats(vocab, -3, 3, 1000 + i);
    r.temperature = 0.5f + 0.05f * i;
    r.top_k = i % 3 == 0 ? 50 : 0;
    r.top_p = i % 4 == 0 ? 0.9f : 1.0f;
    r.seed = 1234 + i;
    r.sample_index = i * 3;
    rows.push_back(r);
  }
  const auto batch = Sample(rows);
  const auto again = Sample(rows);
  std::vector<Row> reversed(rows.rbegin(), rows.rend());
  const auto reversed_result = Sample(reversed);
  for (int i = 0; i < 37; ++i) {
    EXPECT_EQ(batch[i].id, again[i].id) << i;
    EXPECT_EQ(batch[i].id, reversed_result[36 - i].id) << i;
    if (i % 9 == 0) {
      EXPECT_EQ(batch[i].id, Sample({rows[i]})[0].id) << i;
    }
  }
  // A different sample index (or seed) draws differently somewhere.
  int changed = 0;
  for (Row& r : rows) r.sample_index += 1;
  const auto next = Sample(rows);
  for (int i = 0; i < 37; ++i) changed += next[i].id != batch[i].id;
  EXPECT_GT(changed, 10);
}

TEST(SamplingTest, TopKAndTopPKeepTheRightSetsOnLargeVocabularies) {
  for (const int vocab : {151936, 262144}) {
    std::vector<float> logits = RandomFloats(vocab, -4, 4, vocab);
    // A peaked head so that top-p keeps few tokens.
    for (int i = 0; i < 40; ++i) logits[(i * 7919) % vocab] = 12.0f - 0.25f * i;
    const float temperature = 0.8f;
    const std::vector<int> rank = RankByLogit(logits);
    // Masses in rank order at this temperature.
    std::vector<double> mass(vocab);
    double total = 0;
    for (int j = 0; j < vocab; ++j) {
      mass[j] = std::exp((logits[rank[j]] - logits[rank[0]]) / temperature);
      total += mass[j];
    }
    // top_p midway between two cumulative masses: the cut is unambiguous.
    const int keep_p = 17;
    double cum = 0;
    for (int j = 0; j < keep_p - 1; ++j) cum += mass[j];
    const float top_p = static_cast<float>((cum + mass[keep_p - 1] / 2) / total);
    // top_k + top_p: top-p renormalises over the 25 survivors of top-k.
    const int top_k = 25;
    double cum_k = 0, total_k = 0;
    for (int j = 0; j < top_k; ++j) total_k += mass[j];
    for (int j = 0; j < 9; ++j) cum_k += mass[j];
    const float top_p_in_k = static_cast<float>((cum_k + mass[9] / 2) / total_k);

    std::vector<Row> rows;
    for (int draw = 0; draw < 64; ++draw) {
      Row r{logits, temperature, 0, 1.0f, 7, static_cast<uint64_t>(draw)};
      if (draw % 3 == 0) r.top_k = top_k;
      if (draw % 3 == 1) r.top_p = top_p;
      if (draw % 3 == 2) {
        r.top_k = top_k;
        r.top_p = top_p_in_k;
      }
      rows.push_back(r);
    }
    const auto results = Sample(rows);
    for (int draw = 0; draw < 64; ++draw) {
      const int want = draw % 3 == 0 ? top_k : draw % 3 == 1 ? keep_p : 10;
      EXPECT_EQ(results[draw].candidates, want) << "vocab " << vocab << " draw " << draw;
      const int position = std::find(rank.begin(), rank.end(), results[draw].id) - rank.begin();
      EXPECT_LT(position, want);
    }
  }
}

TEST(SamplingTest, TopLogprobsAreSortedLogSoftmaxOfRawLogits) {
  std::vector<Row> rows;
  for (const int vocab : {3, 1000, 128256}) {
    Row r;
    r.logits = RandomFloats(vocab, -8, 8, vocab + 1);
    if (vocab > 100) r.logits[vocab - 1] = r.logits[5] = r.logits[60] = 30.0f;  // tie at the top
    r.temperature = 0.7f;
    r.seed = 3;
    const int k = std::min(vocab, 20);
    const RowResult got = Sample({r}, k)[0];
    const std::vector<int> rank = RankByLogit(r.logits);
    const double lse = LogSumExp(r.logits);
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(got.top_ids[j], rank[j]) << "vocab " << vocab << " rank " << j;
      EXPECT_NEAR(got.top_logprobs[j], r.logits[rank[j]] - lse, 1e-4);
    }
    EXPECT_NEAR(got.logprob, r.logits[got.id] - lse, 1e-4);
  }
}

TEST(SamplingTest, DrawsFollowTheTemperedDistribution) {
  // 12 tokens, 40000 draws (one row each, distinct sample indices).
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f,  -1.0f, 3.0f, 2.5f,
                                     0.0f, 1.5f, -0.5f, 2.2f,  0.7f, 1.1f};
  const int vocab = logits.size(), draws = 40000;
  for (const auto& [temperature, top_k] : {std::pair{1.0f, 0}, {0.6f, 0}, {1.3f, 5}}) {
    std::vector<Row> rows;
    for (int d = 0; d < draws; ++d) {
      rows.push_back(Row{logits, temperature, top_k, 1.0f, 42, static_cast<uint64_t>(d)});
    }
    const auto results = Sample(rows);
    std::vector<double> expected(vocab, 0.0);
    const std::vector<int> rank = RankByLogit(logits);
    double total = 0;
    for (int j = 0; j < (top_k > 0 ? top_k : vocab); ++j) {
      expected[rank[j]] = std::exp(logits[rank[j]] / temperature);
      total += expected[rank[j]];
    }
    std::vector<int> counts(vocab, 0);
    for (const RowResult& r : results) {
      // A bad id must fail the test, not write outside `counts`.
      ASSERT_TRUE(r.id >= 0 && r.id < vocab) << r.id;
      ++counts[r.id];
    }
    double chi_square = 0;
    int categories = 0;
    for (int i = 0; i < vocab; ++i) {
      if (expected[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "token " << i << " is outside top-k";
        continue;
      }
      const double e = draws * expected[i] / total;
      chi_square += (counts[i] - e) * (counts[i] - e) / e;
      ++categories;
    }
    // 99.9th percentile of chi-square: df 11 -> 31.3, df 4 -> 18.5.
    const double limit = categories == 12 ? 31.3 : 18.5;
    EXPECT_LT(chi_square, limit) << "temperature " << temperature << " top_k " << top_k;
  }
}

TEST(SamplingTest, InfiniteMaxLogitGivesItsLowestIdAsTheHostSamplerDoes) {
  // Every survivor's Gumbel score is NaN or -inf here, so no score wins the
  // race: the kernel must fall back to the argmax (lowest +inf id), never
  // return the out-of-range id `vocab`. 37 tokens: not a multiple of 4.
  std::vector<float> logits(37);
  for (int i = 0; i < 37; ++i) logits[i] = 0.1f * (i % 7);
  logits[3] = logits[9] = INFINITY;
  std::vector<Row> rows;
  for (const int top_k : {0, 5}) {
    for (const float top_p : {1.0f, 0.9f}) rows.push_back(Row{logits, 0.8f, top_k, top_p, 5, 0});
  }
  for (const RowResult& got : Sample(rows)) EXPECT_EQ(got.id, 3);
}

TEST(SamplingTest, NanLogitsAreNeverDrawn) {
  // NaN counts as -inf: only the odd ids can be drawn or counted.
  std::vector<float> logits = RandomFloats(1001, -1, 1, 8);
  for (size_t i = 0; i < logits.size(); i += 2) logits[i] = NAN;
  std::vector<Row> rows;
  for (int d = 0; d < 64; ++d) {
    rows.push_back(Row{logits, 1.0f, 0, 1.0f, 9, static_cast<uint64_t>(d)});
  }
  for (const RowResult& got : Sample(rows)) {
    EXPECT_LT(got.id, 1001);
    EXPECT_EQ(got.id % 2, 1) << got.id;
    EXPECT_EQ(got.candidates, 500);
  }
}

TEST(SamplingTest, RejectsBadParameters) {
  TokenSamplingParams p;
  EXPECT_EQ(LaunchTokenSampling(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pagoda::kernels

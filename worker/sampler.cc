#include "worker/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "kernels/ops/philox.h"

namespace pagoda::worker {
namespace {

using ::pagoda::kernels::Philox4x32Block;
using ::pagoda::kernels::PhiloxDraws;
using ::pagoda::kernels::UniformOpen01;


float LoadLogit(float x) { return std::isnan(x) ? -INFINITY : x; }

// Monotone map from float to unsigned: a < b  <=>  Key(a) < Key(b).
uint32_t OrderedKey(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// log(sum(exp(x))) in double, stable. -inf when every logit is.
double LogSumExp(absl::Span<const float> logits, float max_logit) {
  if (max_logit == -INFINITY) return -INFINITY;
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(LoadLogit(x)) - max_logit);
  return max_logit + std::log(sum);
}

// The key of the k-th largest logit (ties counted): every token at or above
// it survives top-k.
uint32_t TopKThreshold(absl::Span<const float> logits, int k) {
  thread_local std::vector<uint32_t> keys;
  keys.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) keys[i] = OrderedKey(LoadLogit(logits[i]));
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
  return keys[k - 1];
}

// The largest key K such that the mass of the tokens with key >= K (among
// those >= min_key) reaches ceil(top_p * their total mass): top-p's cut.
uint32_t TopPThreshold(absl::Span<const float> logits, uint32_t min_key, float max_logit,
                       float inv_t, float top_p) {
  thread_local std::vector<std::pair<uint32_t, uint64_t>> kept;
  kept.clear();
  uint64_t kept_mass = 0;
  for (float raw : logits) {
    const float x = LoadLogit(raw);
    const uint32_t key = OrderedKey(x);
    if (key < min_key) continue;
    const uint64_t mass = static_cast<uint64_t>(std::exp((x - max_logit) * inv_t) * kTopPMassScale);
    if (mass == 0) continue;
    kept.emplace_back(key, mass);
    kept_mass += mass;
  }
  uint64_t target = static_cast<uint64_t>(std::ceil(static_cast<double>(top_p) * kept_mass));
  target = std::clamp<uint64_t>(target, 1, kept_mass);
  // Walk the tokens in descending key order, sorting only as far as the walk
  // goes: the mass is usually in the first few hundred of a large vocabulary.
  auto higher = [](const auto& a, const auto& b) { return a.first > b.first; };
  uint64_t cumulative = 0;
  for (size_t begin = 0, chunk = 256; begin < kept.size(); begin += chunk, chunk *= 4) {
    const auto first = kept.begin() + begin;
    const auto last = kept.begin() + std::min(kept.size(), begin + chunk);
    std::nth_element(first, last - 1, kept.end(), higher);  // [first, last) are the next largest.
    std::sort(first, last, higher);
    for (auto it = first; it != last; ++it) {
      cumulative += it->second;
      if (cumulative >= target) return it->first;
    }
  }
  return min_key;  // Unreachable: target <= kept_mass.
}

// The largest Gumbel noise UniformOpen01 can give: u <= 1 - 2^-24, so
// -log(-log(u)) <= 16.64. A token whose (x - max) / T + kMaxGumbel is below
// the best score so far cannot win, and needs no noise drawn.
constexpr float kMaxGumbel = 17.0f;

// Gumbel-max over the tokens at or above `threshold`: the argmax of
// (x - max) / T + Gumbel noise, the noise of token i from Philox stream
// (seed, sample_index) at counter i / 4, lane i % 4; lowest id on ties.
// REQUIRES: logits[argmax] = max_logit, a survivor.
int32_t GumbelMaxDraw(absl::Span<const float> logits, int32_t argmax, uint32_t threshold,
                      float max_logit, float inv_t, uint64_t seed, uint64_t sample_index) {
  const size_t vocab = logits.size();
  auto noise = [&](size_t i) {
    const Philox4x32Block draws = PhiloxDraws(seed, sample_index, i / 4);
    return -std::log(-std::log(UniformOpen01(draws.v[i % 4])));
  };
  // fma, as nvcc contracts the device's (x - max) * inv_t + gumbel.
  auto score_of = [&](float x, float gumbel) { return std::fma(x - max_logit, inv_t, gumbel); };
  // Start from the argmax token's score: a bound most tokens cannot reach.
  float best_score = score_of(max_logit, noise(argmax));
  int32_t best_id = argmax;
  for (size_t i = 0; i < vocab; ++i) {
    const float x = LoadLogit(logits[i]);
    if (OrderedKey(x) < threshold || x == -INFINITY) continue;
    // Rounding is monotone, so this bounds the token's score from above.
    if (score_of(x, kMaxGumbel) < best_score) continue;
    const float score = score_of(x, noise(i));
    const int32_t id = static_cast<int32_t>(i);
    if (score > best_score || (score == best_score && id < best_id)) {
      best_score = score;
      best_id = id;
    }
  }
  return best_id;
}

}  // namespace

void SampleRow(absl::Span<const float> logits, const RowSamplingParams& params,
               const RowSampleOutput& out) {
  const int vocab = static_cast<int>(logits.size());
  float max_logit = -INFINITY;
  int32_t argmax = 0;
  for (int i = 0; i < vocab; ++i) {
    const float x = LoadLogit(logits[i]);
    if (x > max_logit) {  // Strict: the lowest id wins ties.
      max_logit = x;
      argmax = i;
    }
  }
  int32_t chosen = argmax;
  if (params.temperature >= kGreedyTemperature && max_logit > -INFINITY) {
    const float inv_t = 1.0f / params.temperature;
    uint32_t threshold = 0;
    if (params.top_k > 0 && params.top_k < vocab) threshold = TopKThreshold(logits, params.top_k);
    if (params.top_p > 0.0f && params.top_p < 1.0f) {
      threshold = TopPThreshold(logits, threshold, max_logit, inv_t, params.top_p);
    }
    chosen = GumbelMaxDraw(logits, argmax, threshold, max_logit, inv_t, params.seed,
                           params.sample_index);
  }
  const double log_normalizer = LogSumExp(logits, max_logit);
  *out.token_id = chosen;
  *out.logprob = static_cast<float>(LoadLogit(logits[chosen]) - log_normalizer);

  const int count = std::min(params.num_logprobs, vocab);
  if (count <= 0) return;
  thread_local std::vector<int32_t> ids;
  ids.resize(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    const float x = LoadLogit(logits[a]), y = LoadLogit(logits[b]);
    return x > y || (x == y && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), before);
  for (int i = 0; i < count; ++i) {
    out.top_ids[i] = ids[i];
    out.top_logprobs[i] = static_cast<float>(LoadLogit(logits[ids[i]]) - log_normalizer);
  }
}

}  // namespace pagoda::worker

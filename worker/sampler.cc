#include "worker/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SampledToken;
using pagoda::worker::v1::SamplingOptions;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// log(sum(exp(x))) in double, stable.
double LogSumExp(absl::Span<const float> logits) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float logit : logits) sum += std::exp(static_cast<double>(logit) - max_logit);
  return max_logit + std::log(sum);
}

// Token ids sorted by logit descending, lower id first on ties. Only the
// first `count` are guaranteed sorted.
std::vector<int32_t> TopIds(absl::Span<const float> logits, size_t count) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  count = std::min(count, ids.size());
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), before);
  ids.resize(count);
  return ids;
}

int32_t Argmax(absl::Span<const float> logits) {
  // max_element returns the first maximum: the lowest id on ties.
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t DrawToken(absl::Span<const float> logits, const SamplingOptions& options,
                  int32_t sample_index) {
  const size_t vocab = logits.size();
  size_t keep = vocab;
  if (options.top_k() > 0) keep = std::min<size_t>(keep, options.top_k());
  // Sorting the whole vocabulary is only needed for top-p; otherwise the top
  // k (or all, in id order) suffice.
  const bool use_top_p = options.top_p() > 0 && options.top_p() < 1;
  std::vector<int32_t> ids;
  if (use_top_p || keep < vocab) {
    ids = TopIds(logits, keep);
  } else {
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
  }
  const double inverse_temperature = 1.0 / options.temperature();
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights(ids.size());
  double total = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    weights[i] = std::exp((logits[ids[i]] - max_logit) * inverse_temperature);
    total += weights[i];
  }
  if (use_top_p) {
    // ids are sorted by probability: keep the shortest prefix reaching top_p.
    const double target = options.top_p() * total;
    double cumulative = 0.0;
    size_t prefix = 0;
    while (prefix < ids.size()) {
      cumulative += weights[prefix++];
      if (cumulative >= target) break;
    }
    ids.resize(prefix);
    weights.resize(prefix);
    total = cumulative;
  }
  const double threshold = UniformForSample(options.seed(), sample_index) * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cumulative += weights[i];
    if (threshold < cumulative) return ids[i];
  }
  return ids.back();  // Rounding left threshold at the very top.
}

}  // namespace

double UniformForSample(uint64_t seed, int32_t sample_index) {
  const uint64_t bits =
      SplitMix64(SplitMix64(seed) ^ SplitMix64(static_cast<uint64_t>(sample_index) + 1));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // Top 53 bits.
}

SampledToken SampleToken(absl::Span<const float> logits, const SamplingOptions& options,
                         int32_t sample_index) {
  SampledToken result;
  const int32_t token = options.temperature() < kGreedyTemperature
                            ? Argmax(logits)
                            : DrawToken(logits, options, sample_index);
  const double log_normalizer = LogSumExp(logits);
  result.set_token_id(token);
  result.set_logprob(static_cast<float>(logits[token] - log_normalizer));
  if (options.num_logprobs() > 0) {
    for (int32_t id : TopIds(logits, options.num_logprobs())) {
      auto* top = result.add_top();
      top->set_token_id(id);
      top->set_logprob(static_cast<float>(logits[id] - log_normalizer));
    }
  }
  return result;
}

}  // namespace pagoda::worker

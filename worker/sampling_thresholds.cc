#include "worker/sampling_thresholds.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "common/sampling_limits.h"
#include "worker/gumbel_draw.h"

namespace pagoda::worker {
namespace {

// Keys are bucketed by their top 12 bits: sign, exponent and 3 mantissa
// bits, so a bucket spans an eighth of a binade of logits. Finding the cut's
// bucket is one pass and a walk of 4096 sums; only that bucket's tokens are
// then ordered (a row's whole vocabulary only when every logit shares one).
constexpr int kThresholdBucketShift = 20;
constexpr int kThresholdBuckets = 1 << (32 - kThresholdBucketShift);

// NaN's key is -inf's (a select, not a branch).
uint32_t ThresholdKey(float raw) {
  const uint32_t key = OrderedFloatKey(raw);
  return raw != raw ? OrderedFloatKey(-INFINITY) : key;
}

uint32_t ThresholdBucket(uint32_t key) { return key >> kThresholdBucketShift; }

}  // namespace

uint32_t TopKThreshold(absl::Span<const float> logits, int k) {
  thread_local std::vector<uint32_t> bucket_counts;
  bucket_counts.assign(kThresholdBuckets, 0);
  uint32_t* const counts = bucket_counts.data();
  for (float raw : logits) ++counts[ThresholdBucket(ThresholdKey(raw))];
  // The bucket of the k-th largest: fewer than k tokens above it, k or more
  // with it.
  const uint32_t wanted = static_cast<uint32_t>(k);
  uint32_t above = 0, bucket = kThresholdBuckets - 1;
  while (above + counts[bucket] < wanted) above += counts[bucket--];
  thread_local std::vector<uint32_t> keys;
  keys.clear();
  for (float raw : logits) {
    const uint32_t key = ThresholdKey(raw);
    if (ThresholdBucket(key) == bucket) keys.push_back(key);
  }
  const auto kth = keys.begin() + (wanted - 1 - above);
  std::nth_element(keys.begin(), kth, keys.end(), std::greater<>());
  return *kth;
}

uint32_t TopPThreshold(absl::Span<const float> logits, uint32_t min_key, float max_logit,
                       float inv_t, float top_p) {
  auto scaled = [&](float raw) {
    return ((std::isnan(raw) ? -INFINITY : raw) - max_logit) * inv_t;
  };
  // The tokens that may have mass: at or above min_key, and not so far below
  // the maximum that their mass rounds down to 0 (on a model's logits, most
  // of the vocabulary). Listed without a branch (every id is written, the
  // count advances by the test), as that test is a coin toss on such rows,
  // so only the list's tokens pay an expf.
  thread_local std::vector<uint32_t> pending_ids;
  pending_ids.resize(logits.size());
  uint32_t* const pending = pending_ids.data();
  size_t count = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    pending[count] = static_cast<uint32_t>(i);
    count += (ThresholdKey(logits[i]) >= min_key) & (scaled(logits[i]) >= kTopPZeroMassBelow);
  }
  auto mass_of = [&](float raw) {
    return static_cast<uint64_t>(std::exp(scaled(raw)) * kTopPMassScale);
  };
  thread_local std::vector<uint64_t> bucket_masses;
  bucket_masses.assign(kThresholdBuckets, 0);
  // A local pointer: the thread-local vector would be reloaded after each
  // call to expf.
  uint64_t* const bucket_mass = bucket_masses.data();
  uint64_t kept_mass = 0;
  for (size_t j = 0; j < count; ++j) {
    const float raw = logits[pending[j]];
    const uint64_t mass = mass_of(raw);
    bucket_mass[ThresholdBucket(ThresholdKey(raw))] += mass;
    kept_mass += mass;
  }
  if (kept_mass == 0) return min_key;
  uint64_t target = static_cast<uint64_t>(std::ceil(static_cast<double>(top_p) * kept_mass));
  target = std::clamp<uint64_t>(target, 1, kept_mass);
  // The cut's bucket: the mass above it is short of the target, with it not.
  uint64_t above = 0;
  uint32_t bucket = kThresholdBuckets - 1;
  while (above + bucket_mass[bucket] < target) above += bucket_mass[bucket--];
  // Its tokens of some mass, in descending key order, until the target.
  thread_local std::vector<std::pair<uint32_t, uint64_t>> members;
  members.clear();
  for (size_t j = 0; j < count; ++j) {
    const float raw = logits[pending[j]];
    const uint32_t key = ThresholdKey(raw);
    if (ThresholdBucket(key) != bucket) continue;
    const uint64_t mass = mass_of(raw);
    if (mass > 0) members.emplace_back(key, mass);
  }
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t cumulative = above;
  for (const auto& [key, mass] : members) {
    cumulative += mass;
    if (cumulative >= target) return key;
  }
  return min_key;  // Unreachable: the bucket's mass reaches the target.
}

}  // namespace pagoda::worker

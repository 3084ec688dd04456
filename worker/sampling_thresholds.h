#ifndef PAGODA_WORKER_SAMPLING_THRESHOLDS_H_
#define PAGODA_WORKER_SAMPLING_THRESHOLDS_H_

// The cuts of top-k and top-p over one row of logits (worker/sampler.h's
// rule), as OrderedFloatKey keys (worker/gumbel_draw.h) of the logits, NaN
// as -inf: a token survives when its key is at or above the cut. Both find
// the cut's bucket of keys (the top 12 bits) in a histogram pass, then order
// only that bucket's tokens, not the row.

#include <cstdint>

#include "absl/types/span.h"

namespace pagoda::worker {

// The key of the k-th largest logit, ties counted (-inf and NaN among
// them): every token at or above it survives top-k.
// REQUIRES: 1 <= k <= logits.size(). Thread-safe.
uint32_t TopKThreshold(absl::Span<const float> logits, int k);

// Top-p's cut: the largest key K such that the tokens with key >= K, among
// those at or above min_key, have mass at least ceil(top_p * their total)
// (at least 1 and at most the total), a token's mass being
// uint64(expf((x - max_logit) * inv_t) * kTopPMassScale)
// (common/sampling_limits.h), tokens of mass 0 left out. min_key when no
// token has mass. Thread-safe.
uint32_t TopPThreshold(absl::Span<const float> logits, uint32_t min_key, float max_logit,
                       float inv_t, float top_p);

// Below this (x - max_logit) * inv_t a token's top-p mass is 0 (e^-28 * 2^40
// is 0.76), so TopPThreshold skips its expf.
inline constexpr float kTopPZeroMassBelow = -28.0f;

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_SAMPLING_THRESHOLDS_H_

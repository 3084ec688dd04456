#ifndef PAGODA_WORKER_SAMPLER_H_
#define PAGODA_WORKER_SAMPLER_H_

#include <cstdint>

#include "absl/types/span.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::worker {

// Below this temperature sampling is greedy (argmax, lowest id on ties).
inline constexpr float kGreedyTemperature = 1e-5f;

// A uniform double in [0, 1) that depends only on (seed, sample_index): a
// counter-based hash, so a sequence's draws never depend on which other
// sequences share its batch or in what order. Callers that sample several
// sequences of one request in parallel must give them distinct seeds.
double UniformForSample(uint64_t seed, int32_t sample_index);

// Picks one token from `logits` (one row, raw model output) under `options`:
// greedy below kGreedyTemperature; otherwise softmax(logits / temperature)
// restricted to the top_k most likely tokens (0 = off), then to the smallest
// most-likely set whose probability reaches top_p (0 or 1 = off; at least one
// token always stays), drawn with UniformForSample(seed, sample_index).
// Ties in probability are ordered by lower token id. Reports the chosen
// token's log_softmax of the raw logits (before temperature and filtering)
// and the num_logprobs highest raw logprobs, descending (lower id first on
// ties). REQUIRES: logits non-empty and finite; options validated
// (FlattenStepPlan does). Pure function: thread-safe.
pagoda::worker::v1::SampledToken SampleToken(absl::Span<const float> logits,
                                             const pagoda::worker::v1::SamplingOptions& options,
                                             int32_t sample_index);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_SAMPLER_H_

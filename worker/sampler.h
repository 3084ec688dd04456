#ifndef PAGODA_WORKER_SAMPLER_H_
#define PAGODA_WORKER_SAMPLER_H_

// The host implementation of the one sampling rule (kernels/ops/sampling.h
// is the device one): the CPU backend's Sample runs it per row, and tests
// use it as the reference for the CUDA sampler.

#include <cstdint>

#include "absl/types/span.h"
#include "common/logits_processing.h"
#include "common/sampling_limits.h"

namespace pagoda::worker {

// One row of a SamplingBatch, on the host.
struct RowSamplingParams {
  float temperature = 0.0f;
  int32_t top_k = 0;   // <= 0 or >= vocab: off.
  float top_p = 1.0f;  // <= 0 or >= 1: off.
  uint64_t seed = 0;
  uint64_t sample_index = 0;
  int num_logprobs = 0;  // In [0, kMaxTopLogprobs].
  // Logits processing (common/logits_processing.h): min_p in [0, 1] (0 =
  // off), the penalties, and the row's edits, sorted by token id, one per
  // token (worker/logits_edits.h builds them).
  float min_p = 0.0f;
  LogitPenalties penalties;
  absl::Span<const LogitEdit> edits;
  // Structured outputs: ceil(vocab / 32) words (TokenMaskAllows), empty for
  // none. Refused tokens are -inf before the rest of the processing.
  absl::Span<const uint32_t> token_mask;
  // Logprobs of the processed logits rather than the raw ones (beam
  // search's candidates; see SampleRow).
  bool processed_logprobs = false;
};

// Where one row's results go (host memory). top_ids and top_logprobs hold
// num_logprobs entries (they may be empty when it is 0).
struct RowSampleOutput {
  int32_t* token_id = nullptr;
  float* logprob = nullptr;
  absl::Span<int32_t> top_ids;
  absl::Span<float> top_logprobs;
};

// Picks one token from `logits` (one row of raw model output) exactly as
// kernels/ops/logits_processing.h then kernels/ops/sampling.h do:
// - first the row's token mask, edits and penalties make the processed logits
//   (common/logits_processing.h: masks, logit_bias, min_tokens' mask,
//   repetition, frequency and presence penalties, in vLLM v1's order);
//   everything below reads the processed logits, except the logprobs;
// - temperature < kGreedyTemperature: argmax of the processed logits,
//   lowest id on ties; when every processed logit is -inf/NaN, the argmax
//   of the raw logits (nothing the request allows survives: the model's
//   choice, rather than an arbitrary id);
// - else min_p keeps the tokens with (x - max) / T >= logf(min_p)
//   (PassesMinP), then top-k keeps every token whose logit is >= the k-th largest (ties
//   kept); top-p then keeps the fewest highest-logit survivors whose mass
//   reaches ceil(top_p * kept mass), masses being exp((x - max) / T) in
//   2^-40 fixed point rounded down (boundary ties kept); then the survivor
//   with the largest (x - max) * (1 / T) + Gumbel noise wins (lowest id on
//   ties), the noise of token i being -log(-log(u)) with u from
//   UniformOpen01(PhiloxDraws(seed, sample_index, i / 4).v[i % 4]).
// Identical inputs give the CUDA sampler's token up to its fast exp and log
// differing from the host's in the last ulp, which can only flip a near-tie.
// Logprobs are log_softmax of the raw logits (computed in double): the
// chosen token's and the num_logprobs largest, descending, lowest id first
// on ties; with processed_logprobs, of the processed logits instead (masked
// tokens -inf, so a masked row renormalises over the tokens it allows),
// unless every processed logit is -inf. NaN logits count as -inf. REQUIRES: logits non-empty and at most
// kMaxSamplingVocab (common/sampling_limits.h: the 64-bit top-p mass sum;
// model configs past it are refused at load); edits' ids inside the row.
// Thread-safe. This overload copies a row that has edits.
void SampleRow(absl::Span<const float> logits, const RowSamplingParams& params,
               const RowSampleOutput& out);

// The same, but processes the row in place (so it costs the edits, not a
// copy of the row): afterwards the row holds the processed logits.
void SampleRowInPlace(absl::Span<float> logits, const RowSamplingParams& params,
                      const RowSampleOutput& out);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_SAMPLER_H_

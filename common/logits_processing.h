#ifndef PAGODA_COMMON_LOGITS_PROCESSING_H_
#define PAGODA_COMMON_LOGITS_PROCESSING_H_

// The logits processing rule, written once for the host sampler
// (worker/sampler.cc) and the CUDA one (kernels/ops/logits_processing.cu).
// Dependency-free, like common/sampling_limits.h, so nvcc compiles it.
//
// vLLM v1's order, per token of a row (after the structured-output token
// mask, TokenMaskAllows, which makes refused tokens -inf): allowed_token_ids and bad words
// masked (-inf), logit_bias added, min_tokens' EOS mask (folded into the
// banned flag: a mask commutes with the bias), then the repetition penalty
// for tokens seen in the prompt or the output (a positive logit divided by
// it, a negative one multiplied), then frequency_penalty x the output count
// and presence_penalty (once if counted) subtracted. Only the tokens a row's
// edits name change (unless allowed_only, when every unnamed token is
// masked), so both samplers touch the counted tokens, not the vocabulary.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PAGODA_LOGITS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PAGODA_LOGITS_HOST_DEVICE inline
#endif

namespace pagoda {

// Flags of a LogitEdit.
inline constexpr uint32_t kLogitBanned = 1;   // Bad word or min_tokens' EOS / stop id.
inline constexpr uint32_t kLogitSeen = 2;     // In the prompt or the output: repetition.
inline constexpr uint32_t kLogitAllowed = 4;  // In allowed_token_ids.

// Everything a row does to one token, merged from the plan's lists (one
// edit per token id, so a device thread per edit never races another).
// 16 bytes, the same layout on host and device.
struct LogitEdit {
  int32_t token_id = 0;
  int32_t output_count = 0;  // Times in the output: frequency, presence.
  float bias = 0.0f;         // logit_bias, 0 when none.
  uint32_t flags = 0;
};
static_assert(sizeof(LogitEdit) == 16);

// A row's penalties; neutral values change nothing.
struct LogitPenalties {
  float repetition = 1.0f;
  float frequency = 0.0f;
  float presence = 0.0f;
  bool allowed_only = false;  // allowed_token_ids given: unnamed tokens masked.
};

// The processed logit of the token `edit` names, from its raw logit (NaN
// counts as -inf). Explicit fmaf so that host and device round alike.
PAGODA_LOGITS_HOST_DEVICE float ProcessLogit(float raw, const LogitEdit& edit,
                                             const LogitPenalties& penalties) {
  if ((edit.flags & kLogitBanned) != 0 ||
      (penalties.allowed_only && (edit.flags & kLogitAllowed) == 0) || raw != raw) {
    return -INFINITY;
  }
  float x = raw + edit.bias;
  if ((edit.flags & kLogitSeen) != 0) {
    x = x > 0.0f ? x / penalties.repetition : x * penalties.repetition;
  }
  x = fmaf(-penalties.frequency, static_cast<float>(edit.output_count), x);
  if (edit.output_count > 0) x -= penalties.presence;
  return x;
}

// Whether a row's token mask (structured outputs: ceil(vocab / 32) words,
// bit id % 32 of word id / 32) lets token `id` be drawn; a null mask lets
// every token. A token the mask refuses is -inf, like a banned one, before
// anything else of the rule: the sampler draws among the allowed tokens.
PAGODA_LOGITS_HOST_DEVICE bool TokenMaskAllows(const uint32_t* mask, int32_t id) {
  return mask == nullptr || ((mask[id >> 5] >> (id & 31)) & 1u) != 0;
}

// The processed logit of a token no edit names: masked when allowed_only.
PAGODA_LOGITS_HOST_DEVICE float UneditedLogit(float raw, const LogitPenalties& penalties) {
  return penalties.allowed_only || raw != raw ? -INFINITY : raw;
}

// min_p after temperature, as vLLM v1: a token survives when its
// probability is at least min_p x the largest, i.e. when
// (x - max) / T >= log(min_p); log_min_p is logf(min_p), computed once per
// row by each sampler.
PAGODA_LOGITS_HOST_DEVICE bool PassesMinP(float x, float max_logit, float inv_t,
                                          float log_min_p) {
  return (x - max_logit) * inv_t >= log_min_p;
}

}  // namespace pagoda

#endif  // PAGODA_COMMON_LOGITS_PROCESSING_H_

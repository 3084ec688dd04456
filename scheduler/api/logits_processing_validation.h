#ifndef PAGODA_SCHEDULER_API_LOGITS_PROCESSING_VALIDATION_H_
#define PAGODA_SCHEDULER_API_LOGITS_PROCESSING_VALIDATION_H_

// The client edge of logits processing: penalties, min_p, logit_bias,
// allowed_token_ids and bad_words of a GenerateRequest, checked and turned
// into SamplingOptions (bounds in common/sampling_limits.h, shared with the
// worker's check). Part of RequestValidator; thread-safe.

#include "absl/status/status.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/model_limits.h"
#include "scheduler/engine/sequence.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

// Sizes only (entries of logit_bias, allowed_token_ids, bad_words and the
// bytes of each word), before any work on them. INVALID_ARGUMENT naming the
// field.
absl::Status CheckLogitsProcessingSizes(const pagoda::v1::SamplingParams& sampling,
                                        const ModelLimits& limits);

// Values: presence_penalty and frequency_penalty in [-2, 2],
// repetition_penalty 0 (off) or [0.01, 2] (unset: the model's default),
// min_p in [0, 1] (unset: the model's default), logit_bias ids inside the
// vocabulary with biases in [-100, 100], allowed_token_ids inside the
// vocabulary, bad_words only with a tokenizer (each tokenized as vLLM does:
// with and without a leading space). None of them with beam search.
// Fills the matching fields of `out`.
absl::Status ValidateLogitsProcessing(const pagoda::v1::SamplingParams& sampling,
                                      const ModelLimits& limits, const Tokenizer* tokenizer,
                                      SamplingOptions& out);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_LOGITS_PROCESSING_VALIDATION_H_

#ifndef PAGODA_WORKER_LOGITS_EDITS_H_
#define PAGODA_WORKER_LOGITS_EDITS_H_

// The worker's edge for logits processing: checks a sequence's processing
// options (penalties, min_p, logit_bias, allowed and banned ids, prompt and
// output counts) and merges its sparse lists into one LogitEdit per token
// (common/logits_processing.h), the form both samplers take.

#include <vector>

#include "absl/status/status.h"
#include "common/logits_processing.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::worker {

// INVALID_ARGUMENT (the message names the field, without the seq_id) for:
// presence or frequency penalty outside [-2, 2] or NaN, repetition penalty
// neither 0 nor in [0.01, 2], min_p outside [0, 1], logit_bias lists of
// different lengths or over 300 entries, a bias outside [-100, 100], a token
// id outside [0, vocab_size) in any list, a repeated id in logit_bias or the
// output counts, output lists of different lengths, a count below 1, and
// lists longer than `max_tokens` (the sequence's context: no list may name
// more distinct tokens than it holds) or the vocabulary.
absl::Status CheckLogitsProcessing(const pagoda::worker::v1::SamplingOptions& options,
                                   int vocab_size, int64_t max_tokens);

// The row's penalties (repetition 0 read as 1).
LogitPenalties PenaltiesOf(const pagoda::worker::v1::SamplingOptions& options);

// Appends the row's edits to `edits`, one per named token, sorted by token
// id. REQUIRES: CheckLogitsProcessing(options, vocab_size, ...) is OK.
void AppendLogitEdits(const pagoda::worker::v1::SamplingOptions& options, int vocab_size,
                      std::vector<LogitEdit>* edits);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LOGITS_EDITS_H_

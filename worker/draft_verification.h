#ifndef PAGODA_WORKER_DRAFT_VERIFICATION_H_
#define PAGODA_WORKER_DRAFT_VERIFICATION_H_

// Speculative decoding on the worker: the sampling options of each verified
// row of a sequence with drafts (SequenceStep.draft_token_ids), and the rule
// that turns the k + 1 rows' sampled tokens into the accepted drafts plus
// one token.
//
// The plan's drafts are single tokens (n-gram lookup, or a draft model's
// choices): a point-mass proposal q = δ_x. For it the standard rejection
// rule (accept x with probability min(1, p(x) / q(x)) = p(x); on rejection
// draw from normalize(max(0, p - q)), which is p without x; after k
// acceptances draw the bonus from p) is exactly "draw y from p with the
// row's own seeded draw; accept when y == x, else emit y": P(y == x) = p(x),
// and given y != x, y follows p(·) / (1 - p(x)) over the other tokens.
// Every row is drawn by the one sampling rule (worker/sampler.h: penalties,
// logit_bias, min_p, temperature, top-k, top-p applied to p), row j with
// sample_index + j, so a seeded request yields the very tokens plain
// decoding yields, and a greedy one the argmax at every position.

#include <cstdint>

#include "absl/types/span.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::worker {

// The options of verified row j of a sequence whose drafts before it are
// `earlier_drafts` (drafts[0, j)): `options` with those drafts counted as
// output tokens (frequency, presence and repetition penalties see them, as
// plain decoding would once they are accepted). Returns `options` unchanged
// when no penalty reads the output counts.
// REQUIRES: the drafts are in the vocabulary and `options` passed
// CheckLogitsProcessing.
pagoda::worker::v1::SamplingOptions VerifyRowOptions(
    const pagoda::worker::v1::SamplingOptions& options, absl::Span<const int32_t> earlier_drafts);

// How many drafts the rule accepts: the drafts, in order, while each equals
// the token sampled at its row. `sampled` holds the k + 1 rows' tokens;
// the token emitted after the accepted ones is sampled[result].
// REQUIRES: sampled.size() == drafts.size() + 1.
int CountAcceptedDrafts(absl::Span<const int32_t> drafts, absl::Span<const int32_t> sampled);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_DRAFT_VERIFICATION_H_

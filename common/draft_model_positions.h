#ifndef PAGODA_COMMON_DRAFT_MODEL_POSITIONS_H_
#define PAGODA_COMMON_DRAFT_MODEL_POSITIONS_H_

// The positions a draft model (method draft_model) serves, and whether a
// sequence's proposals fit in them; for the server, which decides which
// rows draft (scheduler/spec/draft_budget.h), and the worker, which refuses
// a plan past them (worker/draft_model.h). vLLM starts a draft whose
// config.json max_position_embeddings is below the target's max_model_len
// (SpeculativeConfig._maybe_override_draft_max_model_len: the draft's
// max_model_len becomes the smaller of the two) and stops drafting once a
// sequence would pass it (GPUModelRunner's effective_drafter_max_model_len,
// checked for the whole batch; Pagoda checks each row). Unlike an EAGLE
// head's (common/eagle_head_positions.h), a draft model's limit is never
// raised: its own positions embed its own tokens.

#include <algorithm>
#include <cstdint>

namespace pagoda {

// The draft model's max_model_len: its own positions, at most the
// target's `max_model_len`.
inline int DraftModelMaxLen(int draft_max_position_embeddings, int max_model_len) {
  return std::min(draft_max_position_embeddings, max_model_len);
}

// Whether the draft model's passes for `num_drafts` proposals after the
// first `length` tokens of a sequence stay within `draft_max_len`
// positions. The passes run the token at position length - 1 and then
// each draft but the last at the positions after it, and the last pass
// writes the last draft's K/V (which the next step reads): positions up
// to length + num_drafts - 1.
inline bool DraftPassesFit(int64_t length, int num_drafts, int draft_max_len) {
  return length + num_drafts <= draft_max_len;
}

}  // namespace pagoda

#endif  // PAGODA_COMMON_DRAFT_MODEL_POSITIONS_H_

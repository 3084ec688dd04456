#ifndef PAGODA_COMMON_EAGLE_HEAD_POSITIONS_H_
#define PAGODA_COMMON_EAGLE_HEAD_POSITIONS_H_

// The positions an EAGLE or EAGLE-3 head serves, as vLLM sets them
// (SpeculativeConfig._maybe_override_draft_max_position_embeddings, called
// for methods eagle and eagle3 only): the head drafts at the target's
// positions, so a head whose config.json max_position_embeddings is below
// what the target serves is raised to it; a larger one is kept. The server
// (scheduler/startup/draft_model_files.h) then starts with such a head, and
// the worker (LlamaModel::LoadEagleHead, LoadEagle3Head) sizes its rotary
// table to the raised value. Only the table's size follows: its values
// come from the head's own rope_theta and rope_scaling, none of which
// (linear, llama3: its own original_max_position_embeddings) reads
// max_position_embeddings, so every position's rotation is the one the
// head's config gives. A draft model (method draft_model) keeps its own
// limit, as in vLLM.

#include <algorithm>

#include "common/model_config.h"

namespace pagoda {

// Raises `head`'s max_position_embeddings to `target_positions` when it is
// below them (vLLM passes the target's max_model_len); true when it did.
inline bool RaiseEagleHeadPositions(int target_positions, ModelConfig* head) {
  if (head->max_position_embeddings >= target_positions) return false;
  head->max_position_embeddings = target_positions;
  return true;
}

}  // namespace pagoda

#endif  // PAGODA_COMMON_EAGLE_HEAD_POSITIONS_H_

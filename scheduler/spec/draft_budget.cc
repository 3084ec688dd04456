#include "scheduler/spec/draft_budget.h"

#include <algorithm>

#include "common/draft_model_positions.h"

namespace pagoda::scheduler {

int DraftBudget(const DraftRequest& request) {
  if (request.beam_search || request.bad_words) return 0;
  if (request.disable_by_batch_size.has_value() &&
      request.running_sequences > *request.disable_by_batch_size) {
    return 0;
  }
  int budget = request.num_speculative_tokens;
  budget = std::min(budget, request.max_tokens - request.output_tokens - 1);
  budget = std::min(budget, request.max_model_len - request.context_tokens - 1);
  if (request.output_tokens < request.min_tokens) {
    budget = std::min(budget, request.min_tokens - request.output_tokens - 1);
  }
  budget = std::max(budget, 0);
  // All or nothing, as vLLM's drafter: a row near the draft's limit does
  // not propose fewer (its next rows would not fit either).
  if (request.draft_max_len.has_value() &&
      !DraftPassesFit(request.context_tokens, budget, *request.draft_max_len)) {
    return 0;
  }
  return budget;
}

}  // namespace pagoda::scheduler

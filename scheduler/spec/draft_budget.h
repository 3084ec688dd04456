#ifndef PAGODA_SCHEDULER_SPEC_DRAFT_BUDGET_H_
#define PAGODA_SCHEDULER_SPEC_DRAFT_BUDGET_H_

// How many drafts a running sequence may carry in the next step: the rules
// that keep speculative decoding's output exactly plain decoding's, given
// what the step plan can express. A pure function, for the scheduler to
// call before proposing.

#include <optional>

namespace pagoda::scheduler {

struct DraftRequest {
  int num_speculative_tokens = 0;  // k of --speculative-config.
  // Running sequences this step, and disable_by_batch_size: above it,
  // nothing is proposed (the "above this batch"; vLLM's doc says
  // "larger than").
  int running_sequences = 0;
  std::optional<int> disable_by_batch_size;
  int context_tokens = 0;  // Prompt plus output so far.
  int output_tokens = 0;
  int max_tokens = 0;  // The request's output limit.
  int min_tokens = 0;
  int max_model_len = 0;
  // The proposer's max_model_len (SpeculativeConfig::draft_max_len: a
  // draft model's positions, or vLLM's max_model_len key); unset where the
  // proposer has the target's (ngram, and EAGLE heads without the key).
  std::optional<int> draft_max_len;
  // What the plan carries once per sequence, not per verified row: bad
  // words' banned ids (they follow the tokens before the row), and beam
  // search (which vLLM also refuses). A structured-output mask is not among
  // them: every method's drafts reach the server before their step (a draft
  // model's proposed a step ahead), which sends a mask per position.
  bool bad_words = false;
  bool beam_search = false;
};

// The drafts the sequence may carry, in [0, num_speculative_tokens]:
// - 0 for beam search, bad words, or a batch above
//   disable_by_batch_size;
// - no row samples past max_tokens: at most max_tokens - output_tokens - 1
//   (the token after the drafts is output too);
// - no position reaches max_model_len: at most max_model_len -
//   context_tokens - 1;
// - before min_tokens, every row must still ban EOS and the stop ids as the
//   plan's one banned list does: at most min_tokens - output_tokens - 1.
int DraftBudget(const DraftRequest& request);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_SPEC_DRAFT_BUDGET_H_

#ifndef PAGODA_SCHEDULER_SPEC_NGRAM_PROPOSER_H_
#define PAGODA_SCHEDULER_SPEC_NGRAM_PROPOSER_H_

// Prompt lookup (speculative method "ngram"): draft tokens proposed from the
// sequence's own tokens, as vLLM's NgramProposer proposes them. A pure
// function of the tokens, so the scheduler can call it per sequence per
// step without any state.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace pagoda::scheduler {

// The lookup's bounds (vLLM's prompt_lookup_min, prompt_lookup_max,
// num_speculative_tokens and the model's max_model_len).
struct NgramLookup {
  int min_n = 1;
  int max_n = 1;
  int num_speculative_tokens = 1;
  int max_model_len = 0;
};

// The drafts for a sequence whose tokens (prompt then output) are `tokens`:
// - n is the longest length in [min_n, max_n] for which the last n tokens
//   also occur earlier, ending before the last token (the occurrence may
//   overlap the suffix);
// - of the occurrences of that length, the earliest is taken;
// - the drafts are the tokens that follow it, at most
//   num_speculative_tokens, at most max_model_len - tokens.size() (no
//   draft past the model's length), and at most as many as follow it.
// Empty when no n qualifies, when tokens.size() < min_n, or when the
// sequence is already at max_model_len. O(tokens.size() * max_n) at worst;
// in the common case one vectorised comparison per token, the positions that
// hold the last token then compared further.
// REQUIRES: 1 <= min_n <= max_n, num_speculative_tokens >= 0
// (SpeculativeConfig's checks).
std::vector<int32_t> ProposeNgramDrafts(absl::Span<const int32_t> tokens,
                                        const NgramLookup& lookup);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_SPEC_NGRAM_PROPOSER_H_

#ifndef PAGODA_SCHEDULER_ENGINE_PROMPT_LOGPROB_STORE_H_
#define PAGODA_SCHEDULER_ENGINE_PROMPT_LOGPROB_STORE_H_

// PromptLogprobStore: one request's prompt logprobs (vLLM's prompt_logprobs)
// between the steps that compute them and the output processor that sends
// them. Its group holds it; the scheduler never reads it.

#include <cstddef>
#include <vector>

#include "scheduler/engine/generated_token.h"

namespace pagoda::scheduler {

// Entry i is the logprob of the prompt token at position i + 1, with its top
// logprobs (position 0 has none: nothing predicts it). Kept as the chunks
// that compute them return them, so they survive preemption and worker
// recovery: a recomputed chunk brings back entries already stored, which are
// ignored.
class PromptLogprobStore {
 public:
  explicit PromptLogprobStore(int num_prompt_tokens) : num_prompt_tokens_(num_prompt_tokens) {}

  // Positions stored: 1 .. num_stored().
  int num_stored() const { return static_cast<int>(entries_.size()); }
  // Stores `entries` as the logprobs of positions first_position,
  // first_position + 1, ...: those already stored and those past the prompt
  // are ignored, and so is everything after a gap.
  void Add(int first_position, std::vector<GeneratedToken> entries);
  // The entries stored since the last call, in position order.
  std::vector<GeneratedToken> TakeNew();

 private:
  int num_prompt_tokens_;
  std::vector<GeneratedToken> entries_;
  size_t num_taken_ = 0;  // Entries TakeNew returned.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_PROMPT_LOGPROB_STORE_H_

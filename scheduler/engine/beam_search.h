#ifndef PAGODA_SCHEDULER_ENGINE_BEAM_SEARCH_H_
#define PAGODA_SCHEDULER_ENGINE_BEAM_SEARCH_H_

// Beam search as vLLM v0 does it: the beam score and the step that keeps the
// best extensions of every beam of a group.

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/engine/sequence.h"

namespace pagoda::scheduler {

// Beam score (vLLM v0): cumulative logprob / length^length_penalty, length
// counting prompt and output tokens but not a final EOS or stop token.
double BeamScore(const SequenceGroup& group, const Sequence& seq);

// One beam-search step of width k = group.sampling().best_of, given each
// running beam's sampled token whose `top` holds its 2k most likely next
// tokens (logprobs of the processed logits, step_plan.h: under a constraint
// they renormalise over the tokens the beam's grammar allows; a token at
// -inf, masked, is never an extension, so a beam may offer fewer than 2k).
// Takes the 2k best extensions over all beams by
// cumulative logprob; those ending in EOS (or a stop id, past min_tokens)
// join the finished hypotheses, of which the best k by BeamScore are kept;
// the best k others continue. A beam extended more than once forks (its
// blocks shared, copy on write later); a beam not extended is pruned and
// its blocks freed. Beams reaching max_tokens or max_model_len finish.
// The search ends (remaining beams pruned) when k hypotheses are finished
// and either early_stopping is set or no running beam scores above the
// worst kept one. Pruned sequences get kFinishedPruned.
void AdvanceBeams(SequenceGroup& group,
                  absl::Span<const std::pair<Sequence*, GeneratedToken>> samples,
                  const std::vector<int32_t>& eos_token_ids, int max_model_len,
                  Scheduler& scheduler);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_BEAM_SEARCH_H_

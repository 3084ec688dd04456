#ifndef PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_
#define PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_

// Structured outputs on the engine's side: before each draw of a
// constrained sequence, its matcher (Sequence::ConstraintState) reads the
// output tokens it has not read yet and gives the packed mask of the tokens
// the draw may take. The step plan only promises it
// (SequenceStep.token_mask_follows); the engine computes it while the
// workers run the forward pass and sends it after the plan (StepMasks),
// since only the sampler needs it.

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "scheduler/engine/sequence.h"

namespace pagoda::scheduler {

// Whether the draws of `group` are constrained (it has a grammar).
bool IsConstrained(const SequenceGroup& group);

// The packed token mask (SamplingOptions.token_mask's layout) for the next
// draw of `seq`: the tokens whose bytes keep its output a valid prefix of
// the grammar, and EOS (unless ignore_eos) and the stop token ids only
// where the grammar may end. `banned` (bad words, EOS before min_tokens:
// what the draw's plan would otherwise ban) is taken out of it unless
// nothing else would be left: the grammar wins, so that the output still
// parses. Output tokens the grammar refuses (only a worker that ignored the
// mask could draw one) leave the sequence with just the end tokens. EOS and
// stop tokens in the output are skipped: they add no text. Empty when
// nothing at all is allowed (a model without an EOS token at a dead end):
// the draw is then unconstrained and bans nothing, rather than refused.
// Advances the sequence's matcher. REQUIRES: IsConstrained(group).
std::string NextTokenMask(const SequenceGroup& group, Sequence& seq,
                          absl::Span<const int32_t> eos_token_ids,
                          absl::Span<const int32_t> banned);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_

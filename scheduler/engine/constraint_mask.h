#ifndef PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_
#define PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_

// Structured outputs on the engine's side: before each draw of a
// constrained sequence, its matcher (its ConstraintState, constraint_state.h)
// reads the output tokens it has not read yet and gives the packed mask of
// the tokens the draw may take. The step plan only promises it
// (SequenceStep.token_mask_follows); the engine computes it while the
// workers run the forward pass and sends it after the plan (StepMasks),
// since only the sampler needs it.
//
// Speculative decoding (prompt lookup, whose drafts the server knows): a
// constrained sequence proposes only the drafts its grammar accepts
// (GrammarValidDrafts), and each verified position gets the mask that
// follows the drafts before it (NextTokenMasks), from a copy of the matcher:
// the sequence's own matcher reads only the tokens that were accepted.
//
// A grammar that waits for a token (SamplingOptions.grammar_after_token, a
// reasoning model's </think>) binds nothing until the output holds it: each
// draw until then may take any token but its bans, and the matcher reads
// only the tokens after it.

#include <cstdint>
#include <string>
#include <vector>

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

// How many of `drafts`, from the first, the grammar of `seq` accepts in
// turn after its output so far: the drafts a constrained sequence may
// propose (vLLM's validate_tokens). Stops before an EOS or stop token (the
// output ends there: nothing after it needs a mask) and at every draft once
// the output broke the grammar. Advances the sequence's matcher over its
// output only. REQUIRES: IsConstrained(group).
int GrammarValidDrafts(const SequenceGroup& group, Sequence& seq,
                       absl::Span<const int32_t> eos_token_ids, absl::Span<const int32_t> drafts);

// The masks of the drafts.size() + 1 verified positions of `seq`: position
// 0's is NextTokenMask's, position i's is the one NextTokenMask would give
// once drafts[0, i) were output tokens (a copy of the matcher reads them;
// `banned` applies at every position: DraftBudget keeps a sequence before
// min_tokens from carrying drafts past it). Should a draft be refused after
// all (GrammarValidDrafts was not asked), the positions after it repeat the
// mask that refused it: it cannot be accepted there, so they are never
// sampled. Advances the sequence's matcher over its output only.
// REQUIRES: IsConstrained(group).
std::vector<std::string> NextTokenMasks(const SequenceGroup& group, Sequence& seq,
                                        absl::Span<const int32_t> drafts,
                                        absl::Span<const int32_t> eos_token_ids,
                                        absl::Span<const int32_t> banned);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_

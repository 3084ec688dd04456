#ifndef PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_
#define PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_

// Structured outputs on the engine's side: before each draw of a
// constrained sequence, its matcher (Sequence::ConstraintState) reads the
// output tokens it has not read yet and gives the packed mask of the tokens
// the draw may take, which the step plan carries to the worker's sampler.

#include <cstdint>

#include "absl/types/span.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "scheduler/engine/sequence.h"

namespace pagoda::scheduler {

// When `group` has a grammar, sets options->token_mask for the next draw of
// `seq`: the tokens whose bytes keep its output a valid prefix of the
// grammar, and EOS (unless ignore_eos) and the stop token ids only where
// the grammar may end. Tokens `options` already bans (bad words, EOS before
// min_tokens) stay banned unless nothing else would be left: the grammar
// wins, so that the output still parses. Output tokens the grammar refuses
// (only a worker that ignored the mask could draw one) leave the sequence
// with just the end tokens. EOS and stop tokens in the output are skipped:
// they add no text. Nothing happens without a grammar.
void SetTokenMask(const SequenceGroup& group, Sequence& seq, absl::Span<const int32_t> eos_token_ids,
                  pagoda::worker::v1::SamplingOptions* options);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_CONSTRAINT_MASK_H_

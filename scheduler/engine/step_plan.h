#ifndef PAGODA_SCHEDULER_ENGINE_STEP_PLAN_H_
#define PAGODA_SCHEDULER_ENGINE_STEP_PLAN_H_

// BuildStepPlan: the scheduler's decision written as the StepPlan message
// every worker executes.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "scheduler/engine/block_table_deltas.h"
#include "scheduler/engine/sampling_deltas.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/kv/block_manager.h"

namespace pagoda::scheduler {

// Turns the scheduler's decision into the message every worker receives:
// one SequenceStep per scheduled entry, in order (token ids
// [start_position, start_position + num_tokens), the full block table
// (BuildStepPlanInto may send a delta),
// sampling options (or sampling_unchanged or a sampling_delta, BuildStepPlanInto; the
// sequence's own seed, SeedForSequence; greedy with
// 2 x width top logprobs of the processed logits for beam search),
// sample_index = tokens generated
// so far), and the block moves to apply before the forward pass. Rows that
// sample carry their logits processing: penalties, logit_bias, allowed ids,
// the tokens banned this step (bad words whose prefix ends the output; EOS,
// unless ignore_eos, and the stop ids before min_tokens) and the sparse
// counts, derived from the sequence's own tokens (SequenceLogitsProcessing),
// and, for a constrained request, the promise of its grammar's token mask
// (token_mask_follows; its bans then go into that mask, BuildStepMasks).
// An unconstrained row whose last input is a placeholder (overlap) and that
// has multi-token bad words promises a mask too: their ban reads the token
// in flight, so it follows in that mask; its other bans stay in the plan.
// A group that
// wants prompt logprobs has them asked of the chunk's rows whose next token
// is a prompt token, unless the group stored them all already (a
// recomputed chunk).
// REQUIRES: `output` is the latest Schedule() result of the scheduler that
// owns `block_manager`, and every scheduled sequence has a GPU table.
pagoda::worker::v1::StepPlan BuildStepPlan(int64_t step_id, const SchedulerOutput& output,
                                           const BlockManager& block_manager,
                                           absl::Span<const int32_t> eos_token_ids = {});
// The same, into `plan` (empty): the engine builds each step's plan on an
// arena, because a plan of hundreds of sequences is thousands of small
// allocations (and frees) on the engine thread otherwise. With
// `table_deltas`, each row's block table is sent as a delta against the
// previous plan's (BlockTableDeltas; the workers must run the plans in
// order), else whole. With `sampling_deltas`, a row whose sampling options
// are those the previous plan's row sent leaves them out
// (sampling_unchanged; SamplingDeltas), and a row with penalties whose
// options differ from them only in the output counts and bans sends just
// the new output tokens and its bans (sampling_delta). Both are reset
// together.
void BuildStepPlanInto(int64_t step_id, const SchedulerOutput& output,
                       const BlockManager& block_manager, absl::Span<const int32_t> eos_token_ids,
                       pagoda::worker::v1::StepPlan* plan,
                       BlockTableDeltas* table_deltas = nullptr,
                       SamplingDeltas* sampling_deltas = nullptr);

// The token masks `plan` promised (BuildStepPlan(plan.step_id(), output,
// ...)): one row per SequenceStep with token_mask_follows, in plan order,
// its grammar's mask with its bans folded in (constraint_mask.h: advances
// the sequences' matchers), or, for an unconstrained row, every token of
// the `vocab_size` but its multi-token bad words' ban. Called after the plan
// went out, while the workers run the forward pass; the output tokens it
// reads are those the plan was built from, but under overlap without the placeholder: the step
// before has been processed, its real tokens appended. A row whose sequence
// that step finished (a late stop) gets empty masks (its token is dropped
// unread; the worker still gets every row it waits for).
pagoda::worker::v1::StepMasks BuildStepMasks(const pagoda::worker::v1::StepPlan& plan,
                                             const SchedulerOutput& output,
                                             absl::Span<const int32_t> eos_token_ids = {},
                                             int vocab_size = 0);

// Fills the logits processing fields of `options` for the next token of
// `seq` in `group`.
void SetLogitsProcessing(const SequenceGroup& group, const Sequence& seq,
                         absl::Span<const int32_t> eos_token_ids,
                         pagoda::worker::v1::SamplingOptions* options);

// Maps rank 0's sampled tokens back onto the scheduled entries: result i
// belongs to the i-th entry with do_sample. INTERNAL if the count or a seq_id
// does not match (the worker answered a different plan).
absl::StatusOr<std::vector<GeneratedToken>> ExtractSampledTokens(
    const pagoda::worker::v1::StepResult& result, const SchedulerOutput& output);

// Prompt logprobs a step returned, for one scheduled entry: entries[i] is
// the prompt token at position first_position + i's.
struct StepPromptLogprobs {
  SequenceGroup* group;
  int first_position;
  std::vector<GeneratedToken> entries;
};

// Maps rank 0's prompt logprobs back onto the plan's sequences that asked
// for them (prompt_logprob_token_ids): INTERNAL if the count, a seq_id or a
// row count does not match. REQUIRES: `plan` is BuildStepPlan(output).
absl::StatusOr<std::vector<StepPromptLogprobs>> ExtractPromptLogprobs(
    const pagoda::worker::v1::StepResult& result, const pagoda::worker::v1::StepPlan& plan,
    const SchedulerOutput& output);

// The arena options of one step's plan: a plan of a few hundred rows is some
// 100 KB, so blocks that size take it in a handful of allocations rather
// than the default 8 KB steps.
google::protobuf::ArenaOptions StepArenaOptions();

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_STEP_PLAN_H_

#ifndef PAGODA_SCHEDULER_ENGINE_SPECULATION_H_
#define PAGODA_SCHEDULER_ENGINE_SPECULATION_H_

// Speculative decoding's part of each engine step (methods ngram,
// draft_model, eagle, eagle3): drafts proposed for the running decodes
// before Schedule() (draft_model, eagle: only their number, the workers'
// draft model proposes them in the step; for a constrained sequence, whose
// masks must follow each draft, the drafts the workers proposed a step
// ahead) and reserved as lookahead slots, carried by the plan, the accepted
// ones read back from the workers' answer, the rejected drafts' slots given
// back, and the spec_decode counters. The rules that keep the output plain
// decoding's are DraftBudget's (scheduler/spec/draft_budget.h);
// docs/speculative-decoding.md.

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "scheduler/engine/engine_stats.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/spec/speculative_config.h"

namespace pagoda::scheduler {

// One per engine, on the engine thread. Each step, in this order:
// Propose, Schedule(), TakeScheduled, AttachDrafts, (the workers run),
// ExtractAccepted, OutputProcessor::Process, ReleaseRejectedSlots.
class Speculator {
 public:
  // `max_num_batched_tokens`: the decodes and their drafts together stay
  // within it. `eos_token_ids`: the model's, which a constrained sequence's
  // grammar skips in its output (constraint_mask.h).
  Speculator(const SpeculativeConfig& config, int max_model_len, int max_num_batched_tokens,
             std::vector<int32_t> eos_token_ids = {});

  // Before Schedule(): proposes drafts for every running sequence that
  // decodes next (DraftBudget, then prompt lookup over its tokens) and sets
  // its lookahead slots to their count, so the scheduler reserves their KV
  // slots and counts them in the token budget. A constrained sequence keeps
  // the drafts its grammar accepts (GrammarValidDrafts); the plan's masks
  // then cover every verified position (BuildStepMasks). Under a draft
  // model or EAGLE head such a sequence's drafts are those the workers
  // proposed after its last step (when it has not changed since), and it
  // asks for the next step's too (SequenceStep.num_next_draft_proposals),
  // whose room its lookahead slots also reserve.
  void Propose(Scheduler& scheduler);

  // Right after Schedule(): the scheduled decodes keep their drafts (their
  // entries' num_lookahead_slots); every sequence's lookahead slots go back
  // to 0, so that nothing but a proposal made for this step reserves any.
  void TakeScheduled(const SchedulerOutput& output);

  // Puts each scheduled entry's drafts in its SequenceStep (draft_token_ids),
  // or for draft_model their number (num_draft_proposals), and the
  // proposals it asks for after the step (num_next_draft_proposals).
  // REQUIRES: `plan` was built from `output` (one SequenceStep per entry).
  void AttachDrafts(const SchedulerOutput& output, pagoda::worker::v1::StepPlan& plan) const;

  // The drafts the workers accepted for each entry that samples, in the
  // order of ExtractSampledTokens (each with its logprob and top logprobs),
  // and counts them. INTERNAL when the answer does not fit the drafts sent:
  // more accepted than sent (or asked for), an accepted id that is not the
  // draft (or a negative one), logprobs that do not match, or more
  // next-step proposals than asked (or a negative one). Keeps those
  // proposals for the sequence's next Propose.
  // REQUIRES: before OutputProcessor::Process appends the step's tokens.
  absl::StatusOr<std::vector<std::vector<GeneratedToken>>> ExtractAccepted(
      const pagoda::worker::v1::StepResult& result, const SchedulerOutput& output);

  // After the step's tokens were appended: each scheduled sequence's block
  // table shrinks to the blocks its length spans (the rejected drafts'
  // slots go back; emptied blocks are freed).
  void ReleaseRejectedSlots(const SchedulerOutput& output, BlockManager& blocks) const;

  const SpecDecodeTotals& totals() const { return totals_; }

 private:
  // What a sequence carries in the step being scheduled.
  struct Proposal {
    std::vector<int32_t> drafts;  // The server's, or kWorkerDraft each.
    int next = 0;                 // Proposals asked for after the step.
    int lookahead() const { return static_cast<int>(drafts.size()) + next; }
  };
  // Proposals the workers made after a sequence's step, for its next one.
  struct NextDrafts {
    int length = 0;  // The sequence's length they follow.
    std::vector<int32_t> drafts;
  };

  // The drafts `seq` may carry this step, within `token_room` more tokens.
  Proposal ProposalFor(SequenceGroup& group, Sequence& seq, int running_sequences,
                       int token_room) const;
  // The most drafts DraftBudget allows `seq` this step.
  int BudgetFor(const SequenceGroup& group, const Sequence& seq, int running_sequences,
                int token_room) const;
  // A constrained sequence under a worker-side proposer: the proposals its
  // last step returned (cut to `budget` and the grammar) and how many to ask
  // for after this step (at most this step's k).
  Proposal ProposedAhead(SequenceGroup& group, Sequence& seq, int budget, int token_room) const;
  // Counts one entry's verification, as vLLM's SpecDecodingStats.
  void Count(int num_drafts, int num_accepted);

  SpeculativeConfig config_;
  int max_model_len_;
  int max_num_batched_tokens_;
  std::vector<int32_t> eos_token_ids_;
  // The k of the step being proposed for (SpeculativeTokensFor its running
  // sequences), set by Propose.
  int step_k_ = 0;
  // Proposals of the step being scheduled, by seq id, and the sequences
  // whose lookahead slots Propose set.
  absl::flat_hash_map<int64_t, Proposal> proposed_;
  std::vector<Sequence*> with_slots_;
  // What each entry of the last TakeScheduled's output carries.
  std::vector<Proposal> scheduled_;
  // By seq id, the proposals the last step's answer returned; Propose reads
  // and drops them (a sequence that does not decode next step loses them).
  absl::flat_hash_map<int64_t, NextDrafts> next_drafts_;
  SpecDecodeTotals totals_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SPECULATION_H_

#ifndef PAGODA_SCHEDULER_ENGINE_OUTPUT_PROCESSOR_H_
#define PAGODA_SCHEDULER_ENGINE_OUTPUT_PROCESSOR_H_

// OutputProcessor: a step's sampled tokens applied to its sequences (stop
// conditions, logprobs, beam search) and gathered into per-request deltas.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/engine/sequence.h"

namespace pagoda::scheduler {

// What happened to one request in a step, for streaming to its client.
struct RequestDelta {
  std::string request_id;
  struct SeqDelta {
    int index;                               // Position within the group.
    // Usually one: kept inline, as is the usual one SeqDelta of a request,
    // so that a step's deltas cost no allocation per sequence.
    absl::InlinedVector<GeneratedToken, 1> new_tokens;
    SequenceStatus status;                   // Finished statuses are final.
  };
  absl::InlinedVector<SeqDelta, 1> seqs;
  // Prompt logprobs stored since the last delta (SequenceGroup::
  // prompt_logprobs), continuing those sent before; a delta may carry only
  // these.
  std::vector<GeneratedToken> prompt_logprobs;
  bool finished = false;  // Every sequence of the request has finished.
  // Prompt tokens the prefix cache held (SequenceGroup::
  // num_cached_prompt_tokens), in every delta.
  int num_cached_tokens = 0;
};

// Appends the sampled tokens of a step to their sequences, marks the computed
// tokens, runs the stop checks of REFERENCE.md (min_tokens, EOS unless
// ignore_eos, stop_token_ids, max_model_len, max_tokens) and returns one
// delta per request that has something to tell its client. Frees nothing
// but dropped beams: call Scheduler::FreeFinished after.
//
// Parallel sampling: a group with best_of > 1 forks into best_of sequences
// when its first token is sampled; the children share every prompt block
// and recompute the prompt's last token to draw their own first token from
// their own seed. With best_of == n each sequence streams under its own
// index; otherwise nothing is sent until the group finishes, and then the
// best n by cumulative logprob, in that order. Beam search (beam_search.h)
// always answers at the end, in beam-score order. Prompt logprobs a group
// stored this step (the caller stores them first) go out at once, in that
// group's delta.
class OutputProcessor {
 public:
  // `scheduler` forks and frees sequences; it must outlive the processor.
  OutputProcessor(std::vector<int32_t> eos_token_ids, int max_model_len, Scheduler* scheduler);
  // sampled[i] belongs to the i-th entry of output.scheduled that has do_sample;
  // entries without do_sample only get their computed-token count advanced.
  // Speculative decoding: `accepted`, when given, holds for each sampled[i]
  // the drafts the workers accepted before it. They are appended one at a
  // time before sampled[i], each through the stop checks, so a run ends at
  // its first stop (nothing after it is appended or streamed); their K/V
  // counts as computed. Beam search never has drafts.
  std::vector<RequestDelta> Process(
      const SchedulerOutput& output, const std::vector<GeneratedToken>& sampled,
      const std::vector<std::vector<GeneratedToken>>* accepted = nullptr);

 private:
  // A group's samples this step: most groups have one sequence, which
  // needs no allocation.
  using Samples = absl::InlinedVector<std::pair<Sequence*, GeneratedToken>, 1>;
  // The accepted drafts of a sequence this step (none for most).
  using DraftRuns = absl::flat_hash_map<const Sequence*, const std::vector<GeneratedToken>*>;
  // Parallel sampling (or a single sequence): appends, forks, stop checks.
  void ProcessSamples(SequenceGroup& group, const Samples& samples, const DraftRuns& runs,
                      RequestDelta& delta);
  // Appends `drafts` then `token` to seq, one at a time, stopping at the
  // first that finishes it; returns the tokens appended.
  absl::InlinedVector<GeneratedToken, 1> AppendRun(const SequenceGroup& group, Sequence& seq,
                                                   const std::vector<GeneratedToken>* drafts,
                                                   const GeneratedToken& token);
  // Moves each scheduled group's new prompt logprobs into its delta (made
  // when it has none).
  void AttachPromptLogprobs(const SchedulerOutput& output, std::vector<RequestDelta>& deltas);
  // The stop-check status of seq after its last token was appended.
  SequenceStatus StopStatus(const SequenceGroup& group, const Sequence& seq) const;

  std::vector<int32_t> eos_token_ids_;
  int max_model_len_;
  Scheduler* scheduler_;
};

// The last delta of a group the scheduler ignored after it had generated
// tokens: one recomputed after preemption that grew past what the KV cache or
// a step can hold. It ends as at max_tokens (vLLM ends its ignored sequences
// at "length" too) and keeps what it generated: the sequences the scheduler
// cut short (kFinishedIgnored) become kFinishedLength. nullopt when the group
// has generated nothing: its prompt alone can never run, an error for the
// caller to report.
std::optional<RequestDelta> CutShortDelta(SequenceGroup& group);

// The final delta of a group whose sequences are returned only at the end:
// the best `n` by `score` (highest first), re-indexed 0..n-1, all tokens.
RequestDelta FinalDelta(const SequenceGroup& group,
                        double (*score)(const SequenceGroup&, const Sequence&));

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_OUTPUT_PROCESSOR_H_

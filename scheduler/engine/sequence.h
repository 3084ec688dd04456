#ifndef PAGODA_SCHEDULER_ENGINE_SEQUENCE_H_
#define PAGODA_SCHEDULER_ENGINE_SEQUENCE_H_

// A request's sequences as the scheduler sees them: Sequence (tokens,
// status, generated output) and SequenceGroup (the n or beam-width sequences of
// one request, with its sampling and stopping options).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "scheduler/engine/constraint_state.h"
#include "scheduler/engine/generated_token.h"
#include "scheduler/engine/prompt_logprob_store.h"
#include "scheduler/engine/sampling_options.h"
#include "scheduler/engine/token_counts.h"
#include "scheduler/kv/kv_sequence.h"

namespace pagoda::scheduler {

// The finished statuses come last: IsFinished compares against the first.
enum class SequenceStatus {
  kWaiting,
  kRunning,
  kSwapped,
  kFinishedStopped,  // EOS or a stop token id.
  kFinishedLength,   // max_tokens or max_model_len.
  kFinishedAborted,  // Cancelled by the client, or the worker failed.
  kFinishedIgnored,  // Could never be scheduled (too long for the cache or budget).
  kFinishedPruned,   // A beam or sample dropped by the search; never returned.
};
inline bool IsFinished(SequenceStatus status) { return status >= SequenceStatus::kFinishedStopped; }

// One sequence: prompt plus generated tokens, and how many of them already
// have their K/V in the cache. Owned by its SequenceGroup. The block manager
// reads it as a KvSequence.
class Sequence final : public KvSequence {
 public:
  Sequence(int64_t seq_id, std::vector<int32_t> prompt_token_ids);

  int64_t seq_id() const override { return seq_id_; }
  const std::vector<int32_t>& prompt_token_ids() const { return prompt_token_ids_; }
  const std::vector<GeneratedToken>& output() const { return output_; }
  int num_prompt_tokens() const { return static_cast<int>(prompt_token_ids_.size()); }
  int num_output_tokens() const { return static_cast<int>(output_.size()); }
  int length() const override { return num_prompt_tokens() + num_output_tokens(); }
  // Token at position i of prompt + output.
  int32_t token_at(int i) const override;
  int32_t last_token() const { return token_at(length() - 1); }
  // Position in its group's seqs() (0 for the first), fixed at creation.
  int index_in_group() const { return index_in_group_; }
  double cumulative_logprob() const { return cumulative_logprob_; }
  // How often each token occurs in the output, counted on demand
  // (token_counts.h); it follows the sequence through preemption, forks and
  // recovery (which keep or copy the tokens and the count).
  const absl::flat_hash_map<int32_t, int32_t>& output_token_counts() const;

  // Tokens whose K/V are in the cache. Reset to 0 by recompute preemption.
  int num_computed_tokens() const override { return num_computed_tokens_; }
  void set_num_computed_tokens(int n) { num_computed_tokens_ = n; }
  // Speculative decoding's draft slots per decode step (zero by default):
  // counted in the token budget and reserved in the block table.
  int num_lookahead_slots() const override { return num_lookahead_slots_; }
  void set_num_lookahead_slots(int n) { num_lookahead_slots_ = n; }
  // Its request's LoRA adapter (LoraRegistry id; 0: the base model): keys
  // its prefix-cache blocks and KV events. Forks and preemption keep it.
  int lora_id() const override { return lora_id_; }

  SequenceStatus status() const { return status_; }
  void set_status(SequenceStatus status) { status_ = status; }

  void AppendToken(GeneratedToken token);

  // Overlapped scheduling (step_pipeline.h): the token a step in flight
  // samples, not yet known here. Its slot counts in length() and
  // num_output_tokens(), so the next step is planned as if it had arrived;
  // token_at() reads kPlaceholderToken there, and output_token_counts()
  // leaves it out (the worker counts it). At most one at a time.
  static constexpr int32_t kPlaceholderToken = 0;
  void AppendPlaceholder();
  // Takes the placeholder out again, before its real token is appended
  // (AppendToken) or when the step that samples it is abandoned.
  void RemovePlaceholder();
  bool has_pending_token() const { return has_pending_token_; }

  // Structured outputs: where the output stands in its request's grammar
  // (constraint_state.h; constraint_mask.h advances it).
  ConstraintState& constraint_state() { return constraint_state_; }

 private:
  friend class SequenceGroup;
  int64_t seq_id_;
  int index_in_group_ = 0;
  std::vector<int32_t> prompt_token_ids_;
  std::vector<GeneratedToken> output_;
  mutable TokenCounts output_token_counts_;
  double cumulative_logprob_ = 0.0;
  int num_computed_tokens_ = 0;
  int num_lookahead_slots_ = 0;
  int lora_id_ = 0;
  bool has_pending_token_ = false;
  SequenceStatus status_ = SequenceStatus::kWaiting;
  ConstraintState constraint_state_;
};

// The sequences of one request (one, or n / best_of samples, or beams),
// scheduled and preempted together. The block manager reads it as a
// KvSequenceGroup: its phases are the statuses kWaiting, kRunning, kSwapped.
class SequenceGroup final : public KvSequenceGroup {
 public:
  SequenceGroup(std::string request_id, std::vector<int32_t> prompt_token_ids, int64_t first_seq_id,
                SamplingOptions sampling, StoppingOptions stopping, absl::Time arrival_time);

  const std::string& request_id() const { return request_id_; }
  const SamplingOptions& sampling() const { return sampling_; }
  const StoppingOptions& stopping() const { return stopping_; }
  // The prompt's distinct tokens, ascending, when the repetition penalty is
  // on (it reads them every step); empty otherwise.
  const std::vector<int32_t>& distinct_prompt_tokens() const { return distinct_prompt_tokens_; }
  absl::Time arrival_time() const { return arrival_time_; }
  // Scheduling priority under --scheduling-policy priority: lower runs
  // first (vLLM). Validated by the frontend; 0 by default.
  int priority() const { return priority_; }
  void set_priority(int priority) { priority_ = priority; }
  // The request's LoRA adapter (0: the base model), set on every sequence
  // (forks inherit it). Set before the group is scheduled.
  int lora_id() const { return seqs_.front()->lora_id(); }
  void set_lora_id(int lora_id);
  std::vector<std::unique_ptr<Sequence>>& seqs() { return seqs_; }
  const std::vector<std::unique_ptr<Sequence>>& seqs() const { return seqs_; }
  // Sequences with the given status; inline for one, as most groups hold
  // (the scheduler asks every group at every step).
  absl::InlinedVector<Sequence*, 1> SeqsWithStatus(SequenceStatus status) const;
  absl::InlinedVector<const KvSequence*, 1> SequencesIn(KvPhase phase) const override;
  int NumUnfinished() const;
  // Prompt logprobs need every prompt row's logits, which a cached block
  // does not have: such a group computes its whole prompt.
  bool SkipsPrefixCache() const override { return sampling_.wants_prompt_logprobs(); }

  // Prompt logprobs (when asked), as the steps that compute them return them.
  PromptLogprobStore& prompt_logprobs() { return prompt_logprobs_; }
  const PromptLogprobStore& prompt_logprobs() const { return prompt_logprobs_; }
  // Adds to the group a copy of `parent` (tokens, logprobs, token counts,
  // computed count, status, constraint matcher) under a new id, for
  // parallel sampling and beam search, and returns it (owned by the group).
  // Blocks are not copied: the caller forks them with BlockManager::Fork.
  // REQUIRES: parent belongs to this group.
  Sequence* AddForkedSequence(const Sequence& parent, int64_t child_seq_id);
  bool IsFinished() const { return NumUnfinished() == 0; }

  // Set when the first token is produced (time to first token).
  absl::Time first_token_time = absl::InfinitePast();

  // Preemption bookkeeping: how often, and how many steps produced tokens
  // since the last preemption (anti-thrashing victim choice).
  void MarkPreempted() {
    ++num_preemptions_;
    steps_since_preemption_ = 0;
  }
  void MarkProgress() { ++steps_since_preemption_; }
  int num_preemptions() const { return num_preemptions_; }

  // Prompt tokens the prefix cache held when the group was first admitted
  // (vLLM's num_cached_tokens): recorded once, kept through preemption and
  // worker recovery, which compute them again; 0 until then.
  void RecordCachedPromptTokens(int tokens) {
    if (cached_prompt_tokens_ < 0) cached_prompt_tokens_ = tokens;
  }
  int num_cached_prompt_tokens() const { return std::max(0, cached_prompt_tokens_); }

  // Overlapped scheduling: the group's last step is in flight and its next
  // one needs that step's tokens on the server first (a fork, beam search,
  // a grammar, its last token), so the scheduler leaves it out of the step
  // planned meanwhile (step_pipeline.h).
  bool waits_for_tokens() const { return waits_for_tokens_; }
  void set_waits_for_tokens(bool waits) { waits_for_tokens_ = waits; }
  // Preempted, and has not run `min_steps` steps since: preempting it again
  // now would throw away the work just redone to resume it.
  bool RecentlyPreempted(int min_steps) const {
    return num_preemptions_ > 0 && steps_since_preemption_ < min_steps;
  }

 private:
  std::string request_id_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  SamplingOptions sampling_;
  StoppingOptions stopping_;
  std::vector<int32_t> distinct_prompt_tokens_;
  PromptLogprobStore prompt_logprobs_;
  absl::Time arrival_time_;
  int priority_ = 0;
  int num_preemptions_ = 0;
  int cached_prompt_tokens_ = -1;  // -1: not yet admitted.
  int steps_since_preemption_ = 0;
  bool waits_for_tokens_ = false;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SEQUENCE_H_

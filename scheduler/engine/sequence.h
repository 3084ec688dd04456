#ifndef PAGODA_SCHEDULER_ENGINE_SEQUENCE_H_
#define PAGODA_SCHEDULER_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pagoda::scheduler {

enum class SequenceStatus {
  kWaiting,
  kRunning,
  kSwapped,
  kFinishedStopped,  // EOS or a stop token id.
  kFinishedLength,   // max_tokens or max_model_len.
  kFinishedAborted,  // Cancelled by the client, or the worker failed.
  kFinishedIgnored,  // Could never be scheduled (too long for the cache or budget).
};
bool IsFinished(SequenceStatus status);

// Per-request decoding options, already validated and with defaults filled in
// (the frontend turns zero values into defaults).
struct SamplingOptions {
  float temperature = 0.0f;  // < 1e-5 = greedy.
  int top_k = 0;             // 0 = off.
  float top_p = 1.0f;
  uint64_t seed = 0;  // Always set: the frontend picks one when the client did not.
  int n = 1;
  int num_logprobs = 0;
};

struct StoppingOptions {
  int max_tokens = 16;
  int min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
};

struct TopLogprob {
  int32_t token_id;
  float logprob;
};

// One generated token with its logprob and (if asked) the top alternatives.
struct GeneratedToken {
  int32_t token_id;
  float logprob;
  std::vector<TopLogprob> top;
};

// One sequence: prompt plus generated tokens, and how many of them already
// have their K/V in the cache. Owned by its SequenceGroup.
class Sequence {
 public:
  Sequence(int64_t seq_id, std::vector<int32_t> prompt_token_ids);

  int64_t seq_id() const { return seq_id_; }
  const std::vector<int32_t>& prompt_token_ids() const { return prompt_token_ids_; }
  const std::vector<GeneratedToken>& output() const { return output_; }
  int num_prompt_tokens() const { return static_cast<int>(prompt_token_ids_.size()); }
  int num_output_tokens() const { return static_cast<int>(output_.size()); }
  int length() const { return num_prompt_tokens() + num_output_tokens(); }
  // Token at position i of prompt + output.
  int32_t token_at(int i) const;
  int32_t last_token() const { return token_at(length() - 1); }
  double cumulative_logprob() const { return cumulative_logprob_; }

  // Tokens whose K/V are in the cache. Reset to 0 by recompute preemption.
  int num_computed_tokens() const { return num_computed_tokens_; }
  void set_num_computed_tokens(int n) { num_computed_tokens_ = n; }

  SequenceStatus status() const { return status_; }
  void set_status(SequenceStatus status) { status_ = status; }

  void AppendToken(GeneratedToken token);

  // A copy of this sequence (tokens, logprobs, computed count, status) under
  // a new id, for parallel sampling and beam search. Blocks are not copied:
  // the caller forks them with BlockManager::Fork.
  std::unique_ptr<Sequence> Fork(int64_t child_seq_id) const;

 private:
  int64_t seq_id_;
  std::vector<int32_t> prompt_token_ids_;
  std::vector<GeneratedToken> output_;
  double cumulative_logprob_ = 0.0;
  int num_computed_tokens_ = 0;
  SequenceStatus status_ = SequenceStatus::kWaiting;
};

// The sequences of one request (one now; n > 1, best_of and beams later),
// scheduled and preempted together.
class SequenceGroup {
 public:
  SequenceGroup(std::string request_id, std::vector<int32_t> prompt_token_ids, int64_t first_seq_id,
                SamplingOptions sampling, StoppingOptions stopping, absl::Time arrival_time);

  const std::string& request_id() const { return request_id_; }
  const SamplingOptions& sampling() const { return sampling_; }
  const StoppingOptions& stopping() const { return stopping_; }
  absl::Time arrival_time() const { return arrival_time_; }
  std::vector<std::unique_ptr<Sequence>>& seqs() { return seqs_; }
  const std::vector<std::unique_ptr<Sequence>>& seqs() const { return seqs_; }
  // Sequences with the given status.
  std::vector<Sequence*> SeqsWithStatus(SequenceStatus status) const;
  int NumUnfinished() const;
  // Adds parent->Fork(child_seq_id) to the group and returns it (owned by
  // the group). REQUIRES: parent belongs to this group.
  Sequence* AddForkedSequence(const Sequence& parent, int64_t child_seq_id);
  bool IsFinished() const { return NumUnfinished() == 0; }

  // Set when the first token is produced (time to first token).
  absl::Time first_token_time = absl::InfinitePast();

 private:
  std::string request_id_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  SamplingOptions sampling_;
  StoppingOptions stopping_;
  absl::Time arrival_time_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SEQUENCE_H_

#ifndef PAGODA_SCHEDULER_ENGINE_SCHEDULER_POLICIES_H_
#define PAGODA_SCHEDULER_ENGINE_SCHEDULER_POLICIES_H_

// The scheduler core's named policies, and the group counts they share:
// QueueOrder (FCFS or priority: an
// ordering of the queues) and PrefillPolicy (how a prompt is cut into the
// step's token budget: chunks, or whole as one chunk). Each is a value built
// once from the SchedulerConfig; the core asks, it holds no state.

#include <algorithm>
#include <deque>
#include <memory>

#include "scheduler/engine/sequence.h"

// Token and seat counts of a group, which the core and the policies share.
namespace pagoda::scheduler::group_counts {

// Tokens a group's sequences in `status` still have to compute.
inline int NumNewTokens(const SequenceGroup& group, SequenceStatus status) {
  int tokens = 0;
  for (const Sequence* seq : group.SeqsWithStatus(status)) {
    tokens += seq->length() - seq->num_computed_tokens();
  }
  return tokens;
}

inline int NumSeqs(const SequenceGroup& group, SequenceStatus status) {
  return static_cast<int>(group.SeqsWithStatus(status).size());
}

// Batch seats the group's waiting sequences take once running: a group that
// forks into best_of samples or beams after its prompt books them all.
inline int SeatsOnceRunning(const SequenceGroup& group) {
  return std::max(NumSeqs(group, SequenceStatus::kWaiting),
                  group.seqs().size() == 1 ? group.sampling().best_of : 1);
}

// Whether a running group is still part-way through its prompt: its
// running sequences have more tokens to compute than one each. Counted in
// one pass without a copy: the scheduler asks it of every group every step.
inline bool PartWayThroughPrompt(const SequenceGroup& group) {
  int new_tokens = 0;
  int running = 0;
  for (const auto& seq : group.seqs()) {
    if (seq->status() != SequenceStatus::kRunning) continue;
    new_tokens += seq->length() - seq->num_computed_tokens();
    ++running;
  }
  return new_tokens > running;
}

// The longest of the group's waiting sequences.
inline int LongestWaiting(const SequenceGroup& group) {
  int longest = 0;
  for (const Sequence* seq : group.SeqsWithStatus(SequenceStatus::kWaiting)) {
    longest = std::max(longest, seq->length());
  }
  return longest;
}

}  // namespace pagoda::scheduler::group_counts

namespace pagoda::scheduler {

// Which waiting request goes first and which running one gives way: kFcfs by
// arrival; kPriority by (priority, arrival), lower priority values first, as
// vLLM's --scheduling-policy priority.
enum class SchedulingPolicy { kFcfs, kPriority };

class QueueOrder {
 public:
  explicit QueueOrder(SchedulingPolicy policy)
      : by_priority_(policy == SchedulingPolicy::kPriority) {}
  bool by_priority() const { return by_priority_; }
  // Whether a goes before b.
  bool Outranks(const SequenceGroup& a, const SequenceGroup& b) const {
    if (by_priority_ && a.priority() != b.priority()) return a.priority() < b.priority();
    return a.arrival_time() < b.arrival_time();
  }
  // Sorts by rank. Stable, so groups that arrived at the same instant keep
  // the order they were added in.
  template <typename Container>
  void Sort(Container& queue) const {
    std::stable_sort(queue.begin(), queue.end(),
                     [this](const auto& a, const auto& b) { return Outranks(*a, *b); });
  }

 private:
  bool by_priority_;
};

// Chunked (vLLM's --enable-chunked-prefill): decodes first, then prompt
// chunks in what they leave of the budget, at most max_partial() prompts
// left part-way. Whole (chunking off, vLLM v0): a prompt is one chunk that
// must fit the budget, none is left part-way, and a step that starts prompts
// carries nothing else.
class PrefillPolicy {
 public:
  PrefillPolicy(bool chunked, int max_model_len, int max_num_batched_tokens, int max_partial,
                int max_long_partial, int long_threshold)
      : chunked_(chunked),
        max_model_len_(max_model_len),
        max_num_batched_tokens_(max_num_batched_tokens),
        max_partial_(chunked ? max_partial : 0),
        max_long_partial_(max_long_partial),
        long_threshold_(chunked ? long_threshold : 0) {}

  bool chunked() const { return chunked_; }
  int max_partial() const { return max_partial_; }
  int max_long_partial() const { return max_long_partial_; }
  // Whether no step could ever hold the waiting group's prompt: longer than
  // the model, or (whole prompts) than the budget. This also catches a
  // recomputed group that grew past the budget.
  bool NeverFits(const SequenceGroup& group) const {
    const int longest = group_counts::LongestWaiting(group);
    if (chunked_) return longest > max_model_len_;
    return longest > std::min(max_model_len_, max_num_batched_tokens_) ||
           group_counts::NumNewTokens(group, SequenceStatus::kWaiting) > max_num_batched_tokens_;
  }
  // The most prompt tokens one group may take in a step.
  int ChunkCap(int token_budget) const {
    return long_threshold_ > 0 ? std::min(token_budget, long_threshold_) : token_budget;
  }
  // Whether the group's prompt tokens still to compute (in `status`) make it
  // a long prefill (above long_prefill_token_threshold, when there is one).
  bool IsLong(const SequenceGroup& group, SequenceStatus status) const {
    return long_threshold_ > 0 && group_counts::NumNewTokens(group, status) > long_threshold_;
  }

 private:
  bool chunked_;
  int max_model_len_;
  int max_num_batched_tokens_;
  int max_partial_;
  int max_long_partial_;
  int long_threshold_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SCHEDULER_POLICIES_H_

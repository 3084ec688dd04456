#ifndef PAGODA_SCHEDULER_ENGINE_SCHEDULER_POLICIES_H_
#define PAGODA_SCHEDULER_ENGINE_SCHEDULER_POLICIES_H_

// The scheduler core's named policies, and the group counts they share:
// QueueOrder (FCFS or priority: an
// ordering of the queues) and PrefillPolicy (how a prompt is cut into the
// step's token budget: chunks, or whole as one chunk). Each is a value built
// once from the SchedulerConfig; the core asks, they hold no state.

#include <algorithm>

#include "scheduler/engine/sequence.h"

// Token and seat counts of a group, which the core and the policies share.
namespace pagoda::scheduler::group_counts {

// A group's sequences in one status: how many, the tokens they still have
// to compute, and the longest one's length. Counted in one pass without a
// copy: the scheduler asks it of every group every step.
struct Pending {
  int seqs = 0;
  int new_tokens = 0;
  int longest = 0;
};
inline Pending PendingIn(const SequenceGroup& group, SequenceStatus status) {
  Pending pending;
  for (const auto& seq : group.seqs()) {
    if (seq->status() != status) continue;
    ++pending.seqs;
    pending.new_tokens += seq->length() - seq->num_computed_tokens();
    pending.longest = std::max(pending.longest, seq->length());
  }
  return pending;
}

// Batch seats the group's waiting sequences take once running: a group that
// forks into best_of samples or beams after its prompt books them all.
inline int SeatsOnceRunning(const SequenceGroup& group) {
  return std::max(PendingIn(group, SequenceStatus::kWaiting).seqs,
                  group.seqs().size() == 1 ? group.sampling().best_of : 1);
}

// Whether a running group is still part-way through its prompt: its
// running sequences have more tokens to compute than one each.
inline bool PartWayThroughPrompt(const SequenceGroup& group) {
  const Pending running = PendingIn(group, SequenceStatus::kRunning);
  return running.new_tokens > running.seqs;
}

}  // namespace pagoda::scheduler::group_counts

namespace pagoda::scheduler {

// Which waiting request goes first and which running one gives way: kFcfs by
// arrival; kPriority by (priority, arrival), lower priority values first, as
// vLLM's --scheduling-policy priority.
enum class SchedulingPolicy { kFcfs, kPriority };

struct QueueOrder {
  bool by_priority;
  // Whether a goes before b.
  bool Outranks(const SequenceGroup& a, const SequenceGroup& b) const {
    if (by_priority && a.priority() != b.priority()) return a.priority() < b.priority();
    return a.arrival_time() < b.arrival_time();
  }
  // The same over the queues' pointers: a comparator for std algorithms.
  template <typename GroupPtr>
  bool operator()(const GroupPtr& a, const GroupPtr& b) const {
    return Outranks(*a, *b);
  }
  // Sorts by rank. Stable, so groups that arrived at the same instant keep
  // the order they were added in.
  template <typename Container>
  void Sort(Container& queue) const {
    std::stable_sort(queue.begin(), queue.end(), *this);
  }
};

// Chunked (vLLM's --enable-chunked-prefill): decodes first, then prompt
// chunks in what they leave of the budget, at most max_partial prompts
// left part-way. Whole (chunking off, vLLM v0): a prompt is one chunk that
// must fit the budget, none is left part-way (max_partial 0), and a step
// that starts prompts carries nothing else.
struct PrefillPolicy {
  bool chunked;
  int max_model_len;
  int max_num_batched_tokens;
  int max_partial;       // Prompts left part-way after a step; 0 without chunks.
  int max_long_partial;  // Of those, longer than long_threshold.
  int long_threshold;    // 0: no cap (always without chunks).

  // Whether no step could ever hold the waiting group's prompt: longer than
  // the model, or (whole prompts) than the budget. This also catches a
  // recomputed group that grew past the budget.
  bool NeverFits(const SequenceGroup& group) const {
    const group_counts::Pending waiting = group_counts::PendingIn(group, SequenceStatus::kWaiting);
    if (chunked) return waiting.longest > max_model_len;
    return waiting.longest > std::min(max_model_len, max_num_batched_tokens) ||
           waiting.new_tokens > max_num_batched_tokens;
  }
  // The most prompt tokens one group may take in a step.
  int ChunkCap(int token_budget) const {
    return long_threshold > 0 ? std::min(token_budget, long_threshold) : token_budget;
  }
  // Whether the group's prompt tokens still to compute (in `status`) make it
  // a long prefill (above long_prefill_token_threshold, when there is one).
  bool IsLong(const SequenceGroup& group, SequenceStatus status) const {
    return long_threshold > 0 && group_counts::PendingIn(group, status).new_tokens > long_threshold;
  }
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SCHEDULER_POLICIES_H_

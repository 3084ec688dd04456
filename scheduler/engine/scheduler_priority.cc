// The priority policy (vLLM's --scheduling-policy priority): queues ordered
// by (priority, arrival), lower values first; victims of preemption come
// from the back of the running queue, so the lowest-ranked group gives way
// first; and a waiting group that cannot be admitted preempts running groups
// it outranks.

#include <algorithm>
#include <memory>
#include <utility>

#include "scheduler/engine/group_counts.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

bool Scheduler::Outranks(const SequenceGroup& a, const SequenceGroup& b) const {
  if (config_.policy == SchedulingPolicy::kPriority && a.priority() != b.priority()) {
    return a.priority() < b.priority();
  }
  return a.arrival_time() < b.arrival_time();
}

void Scheduler::SortByRank(std::deque<std::unique_ptr<SequenceGroup>>& queue) const {
  // Stable, so groups that arrived at the same instant keep the order they
  // were added in.
  std::stable_sort(queue.begin(), queue.end(),
                   [this](const auto& a, const auto& b) { return Outranks(*a, *b); });
}

int Scheduler::PreemptForPriority(SchedulerOutput& output) {
  if (waiting_.empty() || running_.empty()) return 0;
  SortByRank(running_);
  const SequenceGroup& best = *waiting_.front();
  const int new_seqs = group_counts::SeatsOnceRunning(best);
  GroupList recomputed;
  GroupList swapped_out;
  int preempted = 0;
  while (!running_.empty() && Outranks(best, *running_.back())) {
    const AllocStatus fits = CheckAdmissible(best);
    // Nothing to gain for a group that never fits; nothing to do for one
    // that fits now.
    if (fits == AllocStatus::kNever) break;
    if (fits == AllocStatus::kOk && NumRunningSeqs() + new_seqs <= config_.max_num_seqs) break;
    std::unique_ptr<SequenceGroup> victim = std::move(running_.back());
    running_.pop_back();
    // Recomputed rather than swapped: a swapped group would hold new
    // prompts back (vLLM v0) and so the very request it made way for.
    Preempt(std::move(victim), output, recomputed, swapped_out, /*allow_swap=*/false);
    ++preempted;
  }
  for (auto& group : recomputed) waiting_.push_back(std::move(group));
  SortByRank(waiting_);
  return preempted;
}

}  // namespace pagoda::scheduler

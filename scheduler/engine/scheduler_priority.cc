// The priority policy (vLLM's --scheduling-policy priority): queues ordered
// by (priority, arrival), lower values first; victims of preemption come
// from the back of the running queue, so the lowest-ranked group gives way
// first; a waiting group that cannot be admitted preempts running groups it
// outranks; and with chunked prefill, the step that starts a prompt of a more
// urgent priority than every running group carries nothing else.

#include <algorithm>
#include <climits>
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

// Why a step of its own: with chunking, the step that computes an urgent
// prompt would also carry every running decode, and on a CPU worker (where
// a decode step's cost grows with its batch) those decodes were about half
// of what saturation added to the urgent request's time to first token:
// 5.4-5.8 ms with them, 3.4-3.8 ms alone, 1.6-1.7 ms on the idle server
// (scripts/bench_mixed.sh URGENT_EVERY=1, 48 streams, --max-num-seqs 16).
// The running groups lose one step per such prompt. Equal priorities never
// trigger it: an earlier arrival of the same priority is served as vLLM does.
bool Scheduler::ScheduleOutrankingPrompts(SchedulerOutput& output) {
  if (config_.policy != SchedulingPolicy::kPriority || waiting_.empty() || running_.empty() ||
      !swapped_.empty()) {
    return false;
  }
  int most_urgent_running = INT_MAX;
  for (const auto& group : running_) {
    most_urgent_running = std::min(most_urgent_running, group->priority());
  }
  int token_budget = config_.max_num_batched_tokens;
  int num_seqs = NumRunningSeqs();
  bool admitted = false;
  while (!waiting_.empty() && waiting_.front()->priority() < most_urgent_running) {
    const SequenceGroup& group = *waiting_.front();
    const int new_seqs = group_counts::SeatsOnceRunning(group);
    // Only a prompt this step finishes: a longer one is chunked beside the
    // decodes as any other, and so is a group of several sequences
    // (recomputed after forking), whose last tokens take a step of their own.
    if (group_counts::NumSeqs(group, SequenceStatus::kWaiting) != 1 ||
        group_counts::NumNewTokens(group, SequenceStatus::kWaiting) > ChunkCap(token_budget) ||
        num_seqs + new_seqs > config_.max_num_seqs ||
        group_counts::LongestWaiting(group) > config_.max_model_len ||
        CheckAdmissible(group) != AllocStatus::kOk) {
      break;
    }
    AdmitFrontWithChunk(output, token_budget);
    num_seqs += new_seqs;
    admitted = true;
  }
  return admitted;
}

}  // namespace pagoda::scheduler

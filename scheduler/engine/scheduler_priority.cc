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

#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

void Scheduler::RankQueues(SchedulerOutput& output) {
  if (!order_.by_priority) return;
  order_.Sort(waiting_);
  if (waiting_.empty() || running_.empty()) return;
  order_.Sort(running_);
  const SequenceGroup& best = *waiting_.front();
  if (Gated(best)) return;  // Its LoRA adapter waits for a slot: no room to make.
  GroupList recomputed;
  while (!running_.empty() && order_.Outranks(best, *running_.back()) && WantsRoom(best)) {
    std::unique_ptr<SequenceGroup> victim = std::move(running_.back());
    running_.pop_back();
    // Recomputed rather than swapped: a swapped group would hold new
    // prompts back (vLLM v0) and so the very request it made way for.
    Preempt(std::move(victim), output, recomputed, /*allow_swap=*/false);
  }
  for (auto& group : recomputed) waiting_.push_back(std::move(group));
  order_.Sort(waiting_);
}

bool Scheduler::WantsRoom(const SequenceGroup& group) const {
  // Nothing to gain for a group that never fits; nothing to do for one
  // that fits now.
  const AllocStatus fits = CheckAdmissible(group);
  return fits == AllocStatus::kLater ||
         (fits == AllocStatus::kOk &&
          NumRunningSeqs() + group_counts::SeatsOnceRunning(group) > config_.max_num_seqs);
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
  if (waiting_.empty() || running_.empty() || !swapped_.empty()) return false;
  int most_urgent_running = INT_MAX;
  for (const auto& group : running_) {
    most_urgent_running = std::min(most_urgent_running, group->priority());
  }
  int token_budget = config_.max_num_batched_tokens;
  int num_seqs = NumRunningSeqs();
  // Only a prompt this step finishes (no partial-prefill slot): a longer one
  // is chunked beside the decodes as any other, and so is a group of several
  // sequences (recomputed after forking), whose last tokens take a step of
  // their own.
  const PartialCounts no_slot{INT_MAX, INT_MAX};
  while (!waiting_.empty() && waiting_.front()->priority() < most_urgent_running &&
         group_counts::PendingIn(*waiting_.front(), SequenceStatus::kWaiting).seqs == 1 &&
         JudgeAdmission(*waiting_.front(), num_seqs, token_budget, no_slot) == Admission::kAdmit) {
    num_seqs += group_counts::SeatsOnceRunning(*waiting_.front());
    AdmitFrontWithChunk(output, token_budget);
  }
  return output.num_prefill_groups > 0;
}

}  // namespace pagoda::scheduler

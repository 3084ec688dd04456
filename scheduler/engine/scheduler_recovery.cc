// Scheduler::RequeueAllForRecompute: the scheduler's part of worker recovery
// (see recovery.cc for why recomputation reproduces the same tokens).

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

int Scheduler::RequeueAllForRecompute() {
  std::vector<std::unique_ptr<SequenceGroup>> groups;
  for (auto* queue : {&running_, &swapped_, &waiting_}) {
    for (auto& group : *queue) groups.push_back(std::move(group));
    queue->clear();
  }
  for (const auto& group : groups) {
    for (const auto& seq : group->seqs()) {
      if (IsFinished(seq->status())) continue;
      // The workers' blocks (device and swap) are gone with them.
      block_manager_.Free(seq->seq_id());
      seq->set_num_computed_tokens(0);
      seq->set_status(SequenceStatus::kWaiting);
    }
  }
  // Cached prefix blocks name K/V bytes the dead workers held: forget them,
  // or a resumed request would "hit" blocks that hold nothing.
  block_manager_.ResetPrefixCache();
  // First come, first served still: the oldest request is prefilled first.
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a->arrival_time() < b->arrival_time();
  });
  for (auto& group : groups) waiting_.push_back(std::move(group));
  return static_cast<int>(waiting_.size());
}

}  // namespace pagoda::scheduler

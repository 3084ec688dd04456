// The scheduler's calls between steps, which the engine makes after a step
// or when a request is aborted or the workers restarted: freeing what
// finished, committing computed blocks, forks, aborts, requeueing every
// request for recompute, and the KV slot usage figure. Schedule() and its
// policies are in scheduler.cc, scheduler_prefill.cc, scheduler_priority.cc.

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

std::vector<std::unique_ptr<SequenceGroup>> Scheduler::FreeFinished() {
  for (auto& group : running_) {
    for (auto& seq : group->seqs()) {
      if (IsFinished(seq->status())) block_manager_.Free(seq->seq_id());
    }
  }
  const auto finished = std::stable_partition(
      running_.begin(), running_.end(), [](const auto& group) { return !group->IsFinished(); });
  GroupList groups(std::make_move_iterator(finished), std::make_move_iterator(running_.end()));
  running_.erase(finished, running_.end());
  return groups;
}

Scheduler::KvSlotUsage Scheduler::ComputeKvSlotUsage() const {
  const int block_size = config_.block_size;
  // Tokens in each physical block (-1: no running sequence holds it): the
  // most any sequence sharing it has there. Indexed by block id, not hashed:
  // a full batch holds tens of thousands of blocks.
  std::vector<int>& tokens_in_block = kv_usage_tokens_in_block_;
  tokens_in_block.resize(block_manager_.num_total_gpu_blocks(), -1);
  kv_usage_touched_.clear();
  for (const auto& group : running_) {
    for (const auto& seq : group->seqs()) {
      if (seq->status() != SequenceStatus::kRunning) continue;
      const std::vector<int>& table = block_manager_.GetBlockTable(seq->seq_id());
      for (size_t i = 0; i < table.size(); ++i) {
        const int tokens = std::clamp(seq->num_computed_tokens() - static_cast<int>(i) * block_size,
                                      0, block_size);
        int& filled = tokens_in_block.at(table[i]);
        if (filled < 0) kv_usage_touched_.push_back(table[i]);
        filled = std::max(filled, tokens);
      }
    }
  }
  KvSlotUsage usage;
  for (int block : kv_usage_touched_) {
    usage.allocated_slots += block_size;
    usage.filled_slots += tokens_in_block[block];
    tokens_in_block[block] = -1;
  }
  return usage;
}

void Scheduler::ForEachRunningSequence(const std::function<void(SequenceGroup&, Sequence&)>& fn) {
  for (auto& group : running_) {
    for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kRunning)) fn(*group, *seq);
  }
}

void Scheduler::ForEachGroup(
    const std::function<void(const SequenceGroup&, SequenceStatus)>& fn) const {
  for (const auto& group : running_) fn(*group, SequenceStatus::kRunning);
  for (const auto& group : swapped_) fn(*group, SequenceStatus::kSwapped);
  for (const auto& group : waiting_) fn(*group, SequenceStatus::kWaiting);
}

void Scheduler::FreeSequence(Sequence* seq) { block_manager_.Free(seq->seq_id()); }

void Scheduler::CommitComputedBlocks(const SchedulerOutput& output) {
  for (const ScheduledSequence& entry : output.scheduled) {
    block_manager_.CommitComputedBlocks(*entry.seq);
  }
}

Sequence* Scheduler::ForkSequence(SequenceGroup& group, const Sequence& parent) {
  Sequence* child = group.AddForkedSequence(parent, NewSeqId());
  block_manager_.Fork(parent, *child);  // The parent is running, so it has a table.
  return child;
}

std::unique_ptr<SequenceGroup> Scheduler::AbortRequest(const std::string& request_id) {
  for (auto* queue : {&waiting_, &running_, &swapped_}) {
    for (auto it = queue->begin(); it != queue->end(); ++it) {
      if ((*it)->request_id() != request_id) continue;
      std::unique_ptr<SequenceGroup> group = std::move(*it);
      queue->erase(it);
      FinishGroup(*group, SequenceStatus::kFinishedAborted);
      return group;
    }
  }
  return nullptr;
}

std::vector<std::unique_ptr<SequenceGroup>> Scheduler::AbortAll() {
  GroupList aborted = DrainQueues();
  for (auto& group : aborted) FinishGroup(*group, SequenceStatus::kFinishedAborted);
  return aborted;
}

Scheduler::GroupList Scheduler::DrainQueues() {
  GroupList groups;
  for (auto* queue : {&waiting_, &running_, &swapped_}) {
    for (auto& group : *queue) groups.push_back(std::move(group));
    queue->clear();
  }
  return groups;
}

int Scheduler::RequeueAllForRecompute() {
  // The scheduler's part of worker recovery (see engine_recovery.cc for why
  // recomputation reproduces the same tokens).
  GroupList groups = DrainQueues();
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
  QueueOrder{/*by_priority=*/false}.Sort(groups);
  for (auto& group : groups) waiting_.push_back(std::move(group));
  return static_cast<int>(waiting_.size());
}

}  // namespace pagoda::scheduler

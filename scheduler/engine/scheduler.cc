// The scheduler core: Schedule() as six named calls, the running queue's
// decodes and the swapped queue's return, preemption (victim choice,
// recompute or swap) and the block-manager calls they make. Admission and
// chunks: scheduler_prefill.cc; priority: scheduler_priority.cc.

#include "scheduler/engine/scheduler.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "glog/logging.h"

namespace pagoda::scheduler {
using group_counts::PendingIn;

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      order_{config.policy == SchedulingPolicy::kPriority},
      prefill_{config.enable_chunked_prefill,
               config.max_model_len,
               config.max_num_batched_tokens,
               config.enable_chunked_prefill ? config.max_num_partial_prefills : 0,
               config.max_long_partial_prefills,
               config.enable_chunked_prefill ? config.long_prefill_token_threshold : 0},
      block_manager_(config.block_size, config.num_gpu_blocks, config.num_cpu_blocks,
                     config.watermark, config.enable_prefix_caching) {}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput output;
  RankQueues(output);
  if (!ScheduleExclusivePrompts(output)) {
    std::vector<SequenceGroup*> partial;
    ScheduleDecodes(output, partial);
    ScheduleSwapIns(output, partial);
    SchedulePromptChunks(output, partial);
  }
  FinishStep(output);
  return output;
}

void Scheduler::FinishStep(SchedulerOutput& output) {
  order_.Sort(running_);
  order_.Sort(swapped_);
  for (const ScheduledSequence& entry : output.scheduled) {
    output.num_batched_tokens += entry.num_tokens;
  }
}

int Scheduler::NumRunningSeqs() const {
  int num_seqs = 0;
  for (const auto& group : running_) num_seqs += group->NumUnfinished();
  return num_seqs;
}

int Scheduler::BudgetUsed(const SchedulerOutput& output) {
  int used = 0;
  for (const ScheduledSequence& entry : output.scheduled) {
    used += entry.num_tokens + entry.num_lookahead_slots;
  }
  return used;
}

void Scheduler::ScheduleDecodes(SchedulerOutput& output, std::vector<SequenceGroup*>& partial) {
  Queue queue = std::exchange(running_, {});
  GroupList recomputed;
  while (!queue.empty()) {
    std::unique_ptr<SequenceGroup> group = std::move(queue.front());
    queue.pop_front();
    if (group->waits_for_tokens()) {  // Overlap: planned again once they are in.
      running_.push_back(std::move(group));
      continue;
    }
    while (!block_manager_.CanAppendSlots(*group)) {
      // The group gives way itself when nobody else can, or when everyone
      // else is spared and it is not (vLLM would take the latest anyway).
      const bool others_spared =
          !queue.empty() && !Spared(*group) &&
          std::all_of(queue.begin(), queue.end(), [this](const auto& g) { return Spared(*g); });
      if (queue.empty() || others_spared) {
        Preempt(std::move(group), output, recomputed);
        break;
      }
      Preempt(TakeVictim(queue), output, recomputed);
    }
    if (group != nullptr) ScheduleDecodeOrListPartial(std::move(group), output, partial);
  }
  RequeueRecomputed(std::move(recomputed));
}

bool Scheduler::MayPreempt() const {
  int blocks_needed = 0;
  for (const auto& group : running_) {
    if (!group->waits_for_tokens()) blocks_needed += block_manager_.BlocksToAppendSlots(*group);
  }
  if (blocks_needed > block_manager_.num_free_gpu_blocks()) return true;
  if (!order_.by_priority || waiting_.empty() || running_.empty()) return false;
  // RankQueues' first test, without sorting the queues.
  const SequenceGroup& best = **std::min_element(waiting_.begin(), waiting_.end(), order_);
  const SequenceGroup& worst = **std::max_element(running_.begin(), running_.end(), order_);
  return order_.Outranks(best, worst) && WantsRoom(best);
}

void Scheduler::RequeueRecomputed(GroupList recomputed) {
  // Back to the front of the waiting queue, best-ranked first.
  order_.Sort(recomputed);
  waiting_.insert(waiting_.begin(), std::make_move_iterator(recomputed.begin()),
                  std::make_move_iterator(recomputed.end()));
}

void Scheduler::ScheduleSwapIns(SchedulerOutput& output, std::vector<SequenceGroup*>& partial) {
  if (output.num_preempted > 0) return;
  int num_seqs = NumRunningSeqs();
  int num_tokens = BudgetUsed(output);
  while (!swapped_.empty()) {
    SequenceGroup& group = *swapped_.front();
    const AllocStatus fits = block_manager_.CanSwapIn(group);
    if (fits == AllocStatus::kLater) break;
    const int new_seqs = PendingIn(group, SequenceStatus::kSwapped).seqs;
    if (fits == AllocStatus::kNever || new_seqs > config_.max_num_seqs) {
      IgnoreFront(swapped_, "cannot be swapped back in", output);
      continue;
    }
    // Each swapped sequence decodes one token once back. With chunking the
    // budget bounds prompt chunks only, as it does not hold decodes back.
    if ((!prefill_.chunked && num_tokens + new_seqs > config_.max_num_batched_tokens) ||
        num_seqs + new_seqs > config_.max_num_seqs) {
      break;
    }
    std::unique_ptr<SequenceGroup> back = std::move(swapped_.front());
    swapped_.pop_front();
    absl::StatusOr<std::vector<BlockMove>> moves = block_manager_.SwapIn(*back);
    CHECK(moves.ok()) << moves.status();  // CanSwapIn said kOk.
    output.blocks_to_swap_in.insert(output.blocks_to_swap_in.end(), moves->begin(), moves->end());
    for (Sequence* seq : back->SeqsWithStatus(SequenceStatus::kSwapped)) {
      seq->set_status(SequenceStatus::kRunning);
    }
    ScheduleDecodeOrListPartial(std::move(back), output, partial);
    num_tokens += new_seqs;
    num_seqs += new_seqs;
  }
}

void Scheduler::ScheduleDecodeOrListPartial(std::unique_ptr<SequenceGroup> group,
                                            SchedulerOutput& output,
                                            std::vector<SequenceGroup*>& partial) {
  if (group_counts::PartWayThroughPrompt(*group)) {
    partial.push_back(group.get());  // Part-way through its prompt; its blocks cover it all.
  } else {
    AppendSlotsAndSchedule(*group, output);
  }
  running_.push_back(std::move(group));
}

bool Scheduler::Spared(const SequenceGroup& group) const {
  return config_.avoid_thrashing && group.RecentlyPreempted(config_.block_size);
}

std::unique_ptr<SequenceGroup> Scheduler::TakeVictim(Queue& queue) {
  // vLLM always takes the latest arrival, so the same group can be preempted
  // and resumed step after step without producing a token (thrashing).
  const auto unspared =
      std::find_if(queue.rbegin(), queue.rend(), [this](const auto& g) { return !Spared(*g); });
  const auto victim = unspared == queue.rend() ? queue.end() - 1 : std::prev(unspared.base());
  std::unique_ptr<SequenceGroup> group = std::move(*victim);
  queue.erase(victim);
  return group;
}

void Scheduler::Preempt(std::unique_ptr<SequenceGroup> group, SchedulerOutput& output,
                        GroupList& recomputed, bool allow_swap) {
  ++output.num_preempted;
  group->MarkPreempted();
  const int live = PendingIn(*group, SequenceStatus::kRunning).seqs;
  bool swap = config_.preemption_mode == PreemptionMode::kSwap ||
              (config_.preemption_mode == PreemptionMode::kAuto && live > 1);
  // vLLM aborts a group the swap space cannot take; recomputing it is kinder.
  if (!allow_swap || (swap && !block_manager_.CanSwapOut(*group))) swap = false;
  if (swap) {
    absl::StatusOr<std::vector<BlockMove>> moves = block_manager_.SwapOut(*group);
    CHECK(moves.ok()) << moves.status();  // CanSwapOut said yes.
    output.blocks_to_swap_out.insert(output.blocks_to_swap_out.end(), moves->begin(), moves->end());
    for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kRunning)) {
      seq->set_status(SequenceStatus::kSwapped);
    }
    swapped_.push_back(std::move(group));
    return;
  }
  ResetForRecompute(*group);
  recomputed.push_back(std::move(group));
}

void Scheduler::AppendSlotsAndSchedule(SequenceGroup& group, SchedulerOutput& output) {
  for (Sequence* seq : group.SeqsWithStatus(SequenceStatus::kRunning)) {
    absl::StatusOr<std::optional<BlockMove>> copy = block_manager_.AppendSlots(*seq);
    CHECK(copy.ok()) << copy.status();  // CanAppendSlots / CanSwapIn reserved it.
    if (copy->has_value()) output.blocks_to_copy.push_back(**copy);
    output.scheduled.push_back(ScheduledSequence{&group, seq, seq->num_computed_tokens(),
                                                 seq->length() - seq->num_computed_tokens(),
                                                 /*do_sample=*/true, seq->num_lookahead_slots()});
  }
}

void Scheduler::IgnoreFront(Queue& queue, std::string_view why, SchedulerOutput& output) {
  LOG(WARNING) << "request " << queue.front()->request_id() << " ignored: " << why;
  FinishGroup(*queue.front(), SequenceStatus::kFinishedIgnored);
  output.ignored.push_back(std::move(queue.front()));
  queue.pop_front();
}

void Scheduler::ResetForRecompute(SequenceGroup& group) {
  for (const auto& seq : group.seqs()) {
    if (IsFinished(seq->status())) continue;
    block_manager_.Free(seq->seq_id());
    seq->set_num_computed_tokens(0);
    seq->set_status(SequenceStatus::kWaiting);
  }
}

void Scheduler::FinishGroup(SequenceGroup& group, SequenceStatus status) {
  for (auto& seq : group.seqs()) {
    if (!IsFinished(seq->status())) seq->set_status(status);
    block_manager_.Free(seq->seq_id());
  }
}

}  // namespace pagoda::scheduler

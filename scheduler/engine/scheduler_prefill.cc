// The prefill policy's half of the scheduler: admitting prompts and cutting
// them into the step's token budget. With chunked prefill (vLLM's
// --enable-chunked-prefill) a step first takes the running decodes, then
// spends what is left of max_num_batched_tokens on chunks of prompts, so a
// long prompt no longer stalls every decoding stream for the length of its
// prefill, and a prompt longer than the budget is served in several steps
// instead of refused. With whole prompts (vLLM v0) a prompt within the
// budget is one chunk, and a step that admits prompts carries nothing else.
//
// A chunk writes its K/V into the blocks allocated for the whole prompt at
// admission and attends to everything before it (the worker computes tokens
// [start_position, start_position + num_tokens) of a sequence); it samples
// only when it reaches the end of the sequence. The engine commits computed
// blocks to the prefix cache after every step, so a prompt shares its
// finished blocks while its later chunks are still to come.

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

using group_counts::PendingIn;
using group_counts::SeatsOnceRunning;

bool Scheduler::ScheduleExclusivePrompts(SchedulerOutput& output) {
  if (prefill_.chunked) return order_.by_priority && ScheduleOutrankingPrompts(output);
  // A swapped-out group has priority over new prompts (vLLM v0).
  if (!swapped_.empty()) return false;
  int token_budget = config_.max_num_batched_tokens;
  PartialCounts none_partial;
  AdmitPrompts(output, token_budget, none_partial);
  return output.num_prefill_groups > 0;
}

void Scheduler::SchedulePromptChunks(SchedulerOutput& output,
                                     std::vector<SequenceGroup*>& partial) {
  if (!prefill_.chunked) return;
  // Decodes are never held back by the budget (max_num_seqs bounds them):
  // prompt chunks take what they leave.
  int token_budget = std::max(0, config_.max_num_batched_tokens - BudgetUsed(output));
  order_.Sort(partial);
  // max_num_partial_prefills bounds the prompts left part-way after a step
  // (vLLM): those that go on now count, and so do those the budget skips.
  PartialCounts still_partial;
  for (SequenceGroup* group : partial) {
    const bool long_prefill = prefill_.IsLong(*group, SequenceStatus::kRunning);
    const ChunkResult chunk = ScheduleChunk(*group, token_budget, output);
    if (chunk.tokens > 0) ++output.num_prefill_groups;
    if (!chunk.done) still_partial.Add(long_prefill);
  }
  // A swapped-out group has priority over new prompts (vLLM v0).
  if (swapped_.empty()) AdmitPrompts(output, token_budget, still_partial);
}

void Scheduler::AdmitPrompts(SchedulerOutput& output, int& token_budget, PartialCounts& partial) {
  int num_seqs = NumRunningSeqs();
  // Groups passed over, in queue order; they go back to the front of the
  // queue, where they were.
  GroupList passed_over;
  while (!waiting_.empty() && token_budget > 0) {
    const SequenceGroup& group = *waiting_.front();
    const Admission admission = JudgeAdmission(group, num_seqs, token_budget, partial);
    if (admission == Admission::kWait) break;
    if (admission == Admission::kIgnore) {
      // What no step could ever hold is ignored rather than left to wedge
      // the queue.
      IgnoreFront(waiting_,
                  absl::StrCat(PendingIn(group, SequenceStatus::kWaiting).new_tokens,
                               " tokens do not fit the budget or the KV cache"),
                  output);
    } else if (admission == Admission::kPassOver) {
      passed_over.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    } else {
      const bool long_prefill = prefill_.IsLong(group, SequenceStatus::kWaiting);
      num_seqs += SeatsOnceRunning(group);
      if (!AdmitFrontWithChunk(output, token_budget).done) partial.Add(long_prefill);
    }
  }
  waiting_.insert(waiting_.begin(), std::make_move_iterator(passed_over.begin()),
                  std::make_move_iterator(passed_over.end()));
}

Scheduler::Admission Scheduler::JudgeAdmission(const SequenceGroup& group, int num_seqs,
                                               int token_budget,
                                               const PartialCounts& partial) const {
  if (Gated(group)) return Admission::kPassOver;  // Its LoRA adapter's slot is not ready.
  const AllocStatus fits = prefill_.NeverFits(group) ? AllocStatus::kNever : CheckAdmissible(group);
  if (fits == AllocStatus::kLater) return Admission::kWait;
  if (fits == AllocStatus::kNever) return Admission::kIgnore;
  if (num_seqs + SeatsOnceRunning(group) > config_.max_num_seqs) return Admission::kWait;
  // A prompt that would be left part-way needs a free partial-prefill slot
  // (judged without prefix hits, which are known only once allocated);
  // whole prompts have none, so one that does not fit waits.
  if (PendingIn(group, SequenceStatus::kWaiting).new_tokens <= prefill_.ChunkCap(token_budget)) {
    return Admission::kAdmit;
  }
  if (partial.all >= prefill_.max_partial) return Admission::kWait;
  const bool long_slot_free = partial.long_ones < prefill_.max_long_partial;
  return long_slot_free || !prefill_.IsLong(group, SequenceStatus::kWaiting) ? Admission::kAdmit
                                                                             : Admission::kPassOver;
}

AllocStatus Scheduler::CheckAdmissible(const SequenceGroup& group) const {
  if (SeatsOnceRunning(group) > config_.max_num_seqs ||
      PendingIn(group, SequenceStatus::kWaiting).seqs == 0) {
    return AllocStatus::kNever;
  }
  return block_manager_.CanAllocate(group);
}

Scheduler::ChunkResult Scheduler::AdmitFrontWithChunk(SchedulerOutput& output, int& token_budget) {
  std::unique_ptr<SequenceGroup> admitted = std::move(waiting_.front());
  waiting_.pop_front();
  const absl::Status allocated = block_manager_.Allocate(*admitted);
  CHECK(allocated.ok()) << allocated;  // CanAllocate said kOk.
  for (Sequence* seq : admitted->SeqsWithStatus(SequenceStatus::kWaiting)) {
    // Prefix-cache hits need no computing; the last token always does.
    const int cached = block_manager_.FindBlockTable(seq->seq_id())->num_cached_tokens;
    seq->set_num_computed_tokens(std::max(seq->num_computed_tokens(), cached));
    admitted->RecordCachedPromptTokens(cached);
    seq->set_status(SequenceStatus::kRunning);
  }
  const ChunkResult chunk = ScheduleChunk(*admitted, token_budget, output);
  ++output.num_prefill_groups;
  running_.push_back(std::move(admitted));
  return chunk;
}

Scheduler::ChunkResult Scheduler::ScheduleChunk(SequenceGroup& group, int& token_budget,
                                                SchedulerOutput& output) {
  const auto seqs = group.SeqsWithStatus(SequenceStatus::kRunning);
  const bool together = prefill_.chunked && seqs.size() > 1;
  if (together &&
      PendingIn(group, SequenceStatus::kRunning).new_tokens == static_cast<int>(seqs.size())) {
    // Only the last tokens are left: they are sampled together, as a decode.
    AppendSlotsAndSchedule(group, output);
    return ChunkResult{0, true};
  }
  const int token_cap = prefill_.ChunkCap(token_budget);
  ChunkResult result{0, true};
  for (Sequence* seq : seqs) {
    const int remaining = seq->length() - seq->num_computed_tokens() - (together ? 1 : 0);
    const int tokens = std::min(remaining, token_cap - result.tokens);
    if (tokens < remaining) result.done = false;
    if (tokens <= 0) continue;
    output.scheduled.push_back(ScheduledSequence{&group, seq, seq->num_computed_tokens(), tokens,
                                                 /*do_sample=*/!together && tokens == remaining});
    result.tokens += tokens;
  }
  token_budget -= result.tokens;
  output.num_prefill_tokens += result.tokens;
  return result;
}

}  // namespace pagoda::scheduler

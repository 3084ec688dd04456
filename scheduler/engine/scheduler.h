#ifndef PAGODA_SCHEDULER_ENGINE_SCHEDULER_H_
#define PAGODA_SCHEDULER_ENGINE_SCHEDULER_H_

// The iteration-level scheduler: its config, the plan of one step
// (SchedulerOutput) and the Scheduler, the engine thread's only way to the
// queues and the block manager.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scheduler/engine/scheduler_policies.h"
#include "scheduler/engine/sequence.h"
#include "scheduler/kv/block_manager.h"

namespace pagoda::scheduler {

enum class PreemptionMode { kAuto, kRecompute, kSwap };

struct SchedulerConfig {
  int block_size = 16;
  int num_gpu_blocks = 0;
  int num_cpu_blocks = 0;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 2048;
  double watermark = 0.01;
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  bool enable_prefix_caching = true;  // On by default, as in vLLM.
  // Anti-thrashing: a group preempted once is spared until it has run
  // block_size steps, while another victim exists. Off = vLLM's choice
  // (always the latest arrival), kept for comparison.
  bool avoid_thrashing = true;
  // Chunked prefill (vLLM's --enable-chunked-prefill): running decodes are
  // scheduled first, then prompt chunks fill what is left of
  // max_num_batched_tokens. Off here (whole prompts, vLLM v0's policy, which
  // the older unit tests pin down); the server turns it on by default.
  bool enable_chunked_prefill = false;
  // With chunking: at most this many prompts are part-way through their
  // prefill at once, and no prompt gets more than long_prefill_token_threshold
  // tokens in one step (0 = no cap; the server resolves vLLM's default).
  int max_num_partial_prefills = 1;
  int long_prefill_token_threshold = 0;
  // Of those, at most this many longer than long_prefill_token_threshold
  // (vLLM): a long prompt waits for a slot while shorter ones behind it go
  // ahead. Only matters with a threshold and max_num_partial_prefills > 1.
  int max_long_partial_prefills = 1;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
};

// One sequence in a step: compute tokens [num_computed_tokens, length) of it.
struct ScheduledSequence {
  SequenceGroup* group;
  Sequence* seq;
  int start_position;  // == seq->num_computed_tokens() at scheduling time.
  int num_tokens;      // Tokens computed this step (a prompt or a chunk of it, 1 at decode).
  bool do_sample;      // True when the step reaches the end of the sequence.
  // Draft slots reserved past the decode token (seq->num_lookahead_slots()
  // at a decode, 0 for a prompt chunk); counted in the token budget.
  int num_lookahead_slots = 0;
};

// The plan of one iteration. Pointers stay valid until the next Schedule().
struct SchedulerOutput {
  // Without chunking prefills first, then decodes; with it decodes first,
  // then prompt chunks.
  std::vector<ScheduledSequence> scheduled;
  std::vector<BlockMove> blocks_to_swap_in;
  std::vector<BlockMove> blocks_to_swap_out;
  std::vector<BlockMove> blocks_to_copy;
  // Groups finished as kFinishedIgnored this step (removed from the queues;
  // the caller reports them as errors and then may drop them).
  std::vector<std::unique_ptr<SequenceGroup>> ignored;
  int num_batched_tokens = 0;
  int num_prefill_groups = 0;  // Groups given a prompt (or a chunk of one).
  int num_prefill_tokens = 0;  // Tokens of prompts and prompt chunks.
  int num_preempted = 0;
  bool empty() const { return scheduled.empty(); }
};

// Iteration-level scheduler with one token budget (vLLM v1's arithmetic, v0's
// behaviours of REFERENCE.md): the core (scheduler.cc) holds the queues, the
// budget, preemption and the block-manager calls; QueueOrder (FCFS or
// priority, scheduler_priority.cc) and PrefillPolicy (chunked or whole
// prompts, scheduler_prefill.cc) plug in. Owns the groups it has been given
// until they finish. Not thread-safe: only the engine thread calls it.
class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  void AddSequenceGroup(std::unique_ptr<SequenceGroup> group);
  // Marks the request's unfinished sequences aborted and frees their blocks.
  // Returns the group (so the caller can report it) or nullptr if unknown.
  std::unique_ptr<SequenceGroup> AbortRequest(const std::string& request_id);
  // Aborts everything (worker failure, shutdown) and returns the groups.
  std::vector<std::unique_ptr<SequenceGroup>> AbortAll();
  // After the workers were restarted with empty caches: frees every block and
  // moves every unfinished group to waiting (arrival order) to be prefilled
  // again over prompt + generated tokens. Returns the groups requeued.
  int RequeueAllForRecompute();

  SchedulerOutput Schedule();

  // Overlapped scheduling: whether the next Schedule() may preempt a running
  // group, because its decodes need more blocks than are free or, under
  // priority, a waiting group it cannot admit outranks a running one. A step
  // planned while another is in flight must preempt nobody (the tokens in
  // flight are not known yet), so the engine waits for that step first.
  bool MayPreempt() const;

  // After the step's tokens were appended and stop checks ran: frees the
  // blocks of finished sequences and removes finished groups from the running
  // queue, returning them to the caller.
  std::vector<std::unique_ptr<SequenceGroup>> FreeFinished();

  // Frees one finished sequence's blocks at once (stop checks call this).
  void FreeSequence(Sequence* seq);

  // Registers in the prefix cache the blocks the step just computed. Call
  // after OutputProcessor::Process and before FreeFinished, so that the
  // blocks of sequences that finished stay cached.
  void CommitComputedBlocks(const SchedulerOutput& output);

  // Adds a sequence to `group` that shares parent's tokens and blocks
  // (fork, no copy), with the given status and computed-token count, and
  // returns it. REQUIRES: parent belongs to group and has a table.
  Sequence* ForkSequence(SequenceGroup& group, const Sequence& parent);
  // A fresh id for a sequence the engine did not create (forks, finished
  // beam hypotheses). Ids start at 2^40, clear of the engine's.
  int64_t NewSeqId() { return next_seq_id_++; }

  // Calls fn(group, seq) for each kRunning sequence of the running queue,
  // in queue order, between steps (speculation sets lookahead slots so).
  void ForEachRunningSequence(const std::function<void(SequenceGroup&, Sequence&)>& fn);
  // Calls fn(group, queue) for every group: running, swapped, then waiting
  // (kRunning, kSwapped, kWaiting), each queue in order.
  void ForEachGroup(const std::function<void(const SequenceGroup&, SequenceStatus)>& fn) const;
  // LoRA (lora_step.h): while set, a waiting group it refuses is passed over
  // (keeping its place); the engine sets it just before Schedule() and
  // clears it (nullptr) right after.
  void set_admission_gate(std::function<bool(const SequenceGroup&)> gate) {
    admission_gate_ = std::move(gate);
  }

  // KV slots of the GPU blocks that running sequences hold, and how many of
  // them hold a computed token: filled / allocated is the vLLM paper's Fig. 2
  // figure (internal fragmentation and reservation waste), live. A block
  // shared by forked sequences counts once. O(blocks held): call once a step.
  struct KvSlotUsage {
    int64_t filled_slots = 0;
    int64_t allocated_slots = 0;
  };
  KvSlotUsage ComputeKvSlotUsage() const;

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_swapped() const { return static_cast<int>(swapped_.size()); }
  bool HasUnfinished() const { return !waiting_.empty() || !running_.empty() || !swapped_.empty(); }
  const BlockManager& block_manager() const { return block_manager_; }
  BlockManager& block_manager() { return block_manager_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  using GroupList = std::vector<std::unique_ptr<SequenceGroup>>;
  using Queue = std::deque<std::unique_ptr<SequenceGroup>>;
  // Prompts left part-way after this step, and how many of them are long.
  struct PartialCounts {
    int all = 0;
    int long_ones = 0;
  };
  struct ChunkResult {
    int tokens;  // Prompt tokens scheduled.
    bool done;   // Nothing of the prompt is left for later steps.
  };

  // What admission makes of the front waiting group.
  enum class Admission {
    kAdmit,
    kWait,      // Nor anything behind it, this step.
    kPassOver,  // It keeps its place; those behind it may go.
    kIgnore,    // It can never run.
  };

  // The step, in order (Schedule reads as these calls).
  // Under priority: ranks waiting and, while the best waiting group cannot
  // be admitted (blocks or seats) and the lowest-ranked running group ranks
  // below it, preempts that running group (recompute) back to waiting.
  void RankQueues(SchedulerOutput& output);
  // Prompts that get a step of their own (every admitted prompt with whole
  // prompts; urgent ones under priority with chunks). Returns whether any.
  bool ScheduleExclusivePrompts(SchedulerOutput& output);
  // Running groups decode (preempting when blocks run out); groups still
  // part-way through their prompt are listed in `partial` instead.
  void ScheduleDecodes(SchedulerOutput& output, std::vector<SequenceGroup*>& partial);
  // Swapped groups come back, in a step that preempted nobody (vLLM v0).
  void ScheduleSwapIns(SchedulerOutput& output, std::vector<SequenceGroup*>& partial);
  // With chunks: what the running step left of the budget goes to the
  // partial prompts' chunks, then to newly admitted prompts.
  void SchedulePromptChunks(SchedulerOutput& output, std::vector<SequenceGroup*>& partial);
  // Sums the step's tokens and keeps the queues in rank order.
  void FinishStep(SchedulerOutput& output);

  // Admission (scheduler_prefill.cc). Admits waiting groups while seats,
  // the cache and `token_budget` (decremented) allow, each with its first
  // chunk, passing over those JudgeAdmission says to.
  void AdmitPrompts(SchedulerOutput& output, int& token_budget, PartialCounts& partial);
  // Whether the front waiting `group` goes now, by its LoRA gate, the KV
  // cache, `num_seqs` seats taken and `token_budget`. A prompt that would be
  // left part-way goes only while `partial.all` is below the policy's
  // max_partial and, if long, `partial.long_ones` below max_long_partial; a
  // long prompt without a slot is passed over for the prompts behind it.
  Admission JudgeAdmission(const SequenceGroup& group, int num_seqs, int token_budget,
                           const PartialCounts& partial) const;
  // Whether `group` (waiting) can be admitted now, later or never, by its
  // seats and the KV cache; the token budget is the caller's.
  AllocStatus CheckAdmissible(const SequenceGroup& group) const;
  // Finishes the front group of `queue` as ignored (it can never run).
  void IgnoreFront(Queue& queue, std::string_view why, SchedulerOutput& output);
  // Pops the front waiting group, gives it blocks and marks its sequences
  // running, each computed up to its prefix-cache hits; schedules its first
  // chunk from `token_budget` (decremented). REQUIRES: CheckAdmissible kOk.
  ChunkResult AdmitFrontWithChunk(SchedulerOutput& output, int& token_budget);
  // Schedules the next prompt chunk of a running group within what the
  // policy lets it take of `token_budget` (decremented). With chunks, a
  // group of several sequences (recomputed after forking) computes
  // everything but each sequence's last token in chunks and then samples
  // them all in one step, as a decode, so that beams advance together.
  ChunkResult ScheduleChunk(SequenceGroup& group, int& token_budget, SchedulerOutput& output);

  // Priority (scheduler_priority.cc). With chunks: while the best waiting
  // prompts are of a more urgent priority than every running group and fit
  // whole in the budget, the step is theirs alone. Returns whether it
  // scheduled any.
  bool ScheduleOutrankingPrompts(SchedulerOutput& output);
  // Whether the waiting `group` could be admitted if running groups made
  // room (blocks or seats), but not now.
  bool WantsRoom(const SequenceGroup& group) const;

  // Preemption and the block manager (scheduler.cc).
  // Puts a running (or swapped-in) group back in running: it decodes, or,
  // part-way through its prompt, is listed in `partial` for its next chunk.
  void ScheduleDecodeOrListPartial(std::unique_ptr<SequenceGroup> group, SchedulerOutput& output,
                                   std::vector<SequenceGroup*>& partial);
  // Whether anti-thrashing spares `group` as a victim for now.
  bool Spared(const SequenceGroup& group) const;
  // The group to preempt from the back of `queue` (latest arrival first),
  // passing over spared groups when an unspared one exists.
  // REQUIRES: queue non-empty.
  std::unique_ptr<SequenceGroup> TakeVictim(Queue& queue);
  // Frees or swaps out `group`; it lands in `recomputed` or at the back of
  // the swapped queue. `allow_swap` false always recomputes.
  void Preempt(std::unique_ptr<SequenceGroup> group, SchedulerOutput& output, GroupList& recomputed,
               bool allow_swap = true);
  // Appends a slot (and the lookahead slots) for each running sequence of
  // `group`, collecting copy-on-write pairs, and schedules its decode.
  void AppendSlotsAndSchedule(SequenceGroup& group, SchedulerOutput& output);
  // Marks the group's unfinished sequences `status`, frees their blocks.
  void FinishGroup(SequenceGroup& group, SequenceStatus status);
  // Sequences of the running groups that count against max_num_seqs.
  int NumRunningSeqs() const;
  // Tokens and lookahead slots the step has scheduled so far.
  static int BudgetUsed(const SchedulerOutput& output);
  // Empties the three queues into one list (waiting, running, swapped).
  GroupList DrainQueues();
  // Puts recompute-preempted groups back at the front of waiting, in rank
  // order.
  void RequeueRecomputed(GroupList& recomputed);

  SchedulerConfig config_;
  QueueOrder order_;
  PrefillPolicy prefill_;
  BlockManager block_manager_;
  int64_t next_seq_id_ = int64_t{1} << 40;
  Queue waiting_;
  Queue running_;
  Queue swapped_;
  std::function<bool(const SequenceGroup&)> admission_gate_;
  // ComputeKvSlotUsage's scratch, kept between calls: tokens in each block
  // id (-1: not seen), all -1 between calls, and the ids it set. Clearing
  // only those it touched keeps the call O(blocks held), not O(cache size)
  // (a CPU cache of a few GiB holds a million blocks).
  mutable std::vector<int> kv_usage_tokens_in_block_;
  mutable std::vector<int> kv_usage_touched_;
  bool Gated(const SequenceGroup& group) const {
    return admission_gate_ && !admission_gate_(group);
  }
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SCHEDULER_H_

#ifndef PAGODA_SCHEDULER_ENGINE_SCHEDULER_H_
#define PAGODA_SCHEDULER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/engine/sequence.h"
#include "scheduler/kv/block_manager.h"

namespace pagoda::scheduler {

enum class PreemptionMode { kAuto, kRecompute, kSwap };

// Which waiting request goes first and which running one gives way: kFcfs by
// arrival; kPriority by (priority, arrival), lower priority values first, as
// vLLM's --scheduling-policy priority.
enum class SchedulingPolicy { kFcfs, kPriority };

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
  // max_num_batched_tokens. Off here (the v0 whole-prompt policy, which the
  // older unit tests pin down); the server turns it on by default.
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
  int num_prefill_tokens = 0;  // Tokens of prompt chunks (chunked prefill only).
  int num_preempted = 0;
  bool empty() const { return scheduled.empty(); }
};

// Iteration-level scheduler with the vLLM v0 policy (REFERENCE.md): FCFS or
// by priority, whole prompts or chunked prefill (scheduler_chunked.cc).
// Owns the groups it has been given until they finish. Not thread-safe: only
// the engine thread calls it.
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
  // Defined in scheduler_recovery.cc.
  int RequeueAllForRecompute();

  SchedulerOutput Schedule();

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

  // Admits waiting groups FCFS while the budgets and the cache allow.
  void SchedulePrefills(SchedulerOutput& output);
  // Whether `group` (waiting) can be admitted now, later or never, by its
  // seats and the KV cache; the token budget is the caller's.
  AllocStatus CheckAdmissible(const SequenceGroup& group) const;
  // Finishes the front waiting group as ignored (it can never run).
  void IgnoreWaitingFront(SchedulerOutput& output);
  // Pops the front waiting group, gives it blocks and marks its sequences
  // running, each computed up to its prefix-cache hits.
  // REQUIRES: CanAllocate said kOk for it.
  std::unique_ptr<SequenceGroup> AllocateWaitingFront();
  // Grows every running group by one token, preempting the latest-arrived
  // running groups when blocks run out. With `partial` (chunked prefill),
  // groups still part-way through their prompt are kept running but not
  // scheduled: they are listed there for ScheduleChunked.
  void ScheduleDecodes(SchedulerOutput& output, std::vector<SequenceGroup*>* partial = nullptr);

  // Chunked prefill (scheduler_chunked.cc): decodes, swap-ins, then in
  // what is left of the budget the chunks of the partial prefills and of
  // newly admitted prompts.
  void ScheduleChunked(SchedulerOutput& output);
  // Prompts left part-way after this step, and how many of them are long.
  struct PartialCounts {
    int all = 0;
    int long_ones = 0;
  };
  // Admits waiting groups while seats, the cache and the budget allow,
  // giving each a first chunk from `token_budget` (decremented). A prompt
  // that would be left part-way is admitted only while `partial.all` is
  // below max_num_partial_prefills and, if it is long, `partial.long_ones`
  // below max_long_partial_prefills; a long prompt without a slot is passed
  // over (it keeps its place) for the prompts behind it.
  void AdmitPrefillChunks(SchedulerOutput& output, int& token_budget, PartialCounts& partial);
  // Whether `group`'s prompt tokens still to compute (in `status`) make it
  // a long prefill (above long_prefill_token_threshold, when there is one).
  bool IsLongPrefill(const SequenceGroup& group, SequenceStatus status) const;
  struct ChunkResult {
    int tokens;  // Prompt tokens scheduled.
    bool done;   // Nothing of the prompt is left for later steps.
  };
  // Schedules the next prompt chunk of a running group within `token_cap`
  // tokens. A group of several sequences (recomputed after forking)
  // computes everything but each sequence's last token in chunks and then
  // samples them all in one step, as a decode, so that beams advance
  // together.
  ChunkResult ScheduleChunk(SequenceGroup& group, int token_cap, SchedulerOutput& output);
  // Admits the front waiting group (CheckAdmissible said kOk) with its first
  // chunk from `token_budget` (decremented), counting it in `output`.
  ChunkResult AdmitFrontWithChunk(SchedulerOutput& output, int& token_budget);
  // The most prompt tokens one group may take in a step.
  int ChunkCap(int token_budget) const;

  // Priority policy (scheduler_priority.cc): whether a goes before b.
  bool Outranks(const SequenceGroup& a, const SequenceGroup& b) const;
  // Sorts `queue` by rank (arrival under FCFS). Stable.
  void SortByRank(std::deque<std::unique_ptr<SequenceGroup>>& queue) const;
  // Under kPriority: while the best waiting group cannot be admitted (blocks
  // or seats) and the lowest-ranked running group ranks below it, preempts
  // that running group (recompute) back to waiting. Returns how many.
  int PreemptForPriority(SchedulerOutput& output);
  // Under kPriority with chunking: while the best waiting prompts are of a
  // more urgent priority than every running group and fit whole in the
  // budget, the step is theirs alone, as a prefill step is without chunking
  // (the running groups keep their blocks and go on next step). Returns
  // whether it scheduled any.
  bool ScheduleOutrankingPrompts(SchedulerOutput& output);
  // Brings swapped groups back while blocks and budgets allow. With
  // `partial`, as ScheduleDecodes.
  void ScheduleSwapIns(SchedulerOutput& output, std::vector<SequenceGroup*>* partial = nullptr);
  // Whether anti-thrashing spares `group` as a victim for now.
  bool Spared(const SequenceGroup& group) const;
  // The group to preempt from the back of `queue` (latest arrival first),
  // passing over spared groups when an unspared one exists.
  // REQUIRES: queue non-empty.
  std::unique_ptr<SequenceGroup> TakeVictim(std::deque<std::unique_ptr<SequenceGroup>>& queue);
  // Frees or swaps out `group`; it lands in `recomputed` or `swapped_out`.
  // `allow_swap` false always recomputes.
  void Preempt(std::unique_ptr<SequenceGroup> group, SchedulerOutput& output, GroupList& recomputed,
               GroupList& swapped_out, bool allow_swap = true);
  // Appends a slot for each running sequence of `group` (collecting
  // copy-on-write pairs) and schedules its decode.
  void AppendSlotsAndSchedule(SequenceGroup& group, SchedulerOutput& output);
  // Marks the group's unfinished sequences `status`, frees their blocks.
  void FinishGroup(SequenceGroup& group, SequenceStatus status);
  // Sequences of the running groups that count against max_num_seqs.
  int NumRunningSeqs() const;
  // Puts recompute-preempted groups back at the front of waiting, in rank
  // order.
  void RequeueRecomputed(GroupList& recomputed);

  SchedulerConfig config_;
  BlockManager block_manager_;
  int64_t next_seq_id_ = int64_t{1} << 40;
  std::deque<std::unique_ptr<SequenceGroup>> waiting_;
  std::deque<std::unique_ptr<SequenceGroup>> running_;
  std::deque<std::unique_ptr<SequenceGroup>> swapped_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SCHEDULER_H_

#ifndef PAGODA_SCHEDULER_KV_BLOCK_MANAGER_H_
#define PAGODA_SCHEDULER_KV_BLOCK_MANAGER_H_

// BlockManager: the paged KV cache's bookkeeping (vLLM's): each sequence's
// block table, prefix caching by block hash, copy-on-write, swap in and out.
// Metadata only; the workers move the bytes.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/kv/block_pool.h"
#include "scheduler/kv/kv_sequence.h"
#include "scheduler/kv_event_types/kv_events.h"

namespace pagoda::scheduler {

// Answer to "can these blocks be placed on the GPU?" (vLLM's AllocStatus).
enum class AllocStatus {
  kOk,     // Enough free blocks now, above the watermark.
  kLater,  // Not now, but it would fit once blocks are freed.
  kNever,  // Does not fit even in an empty cache (above the watermark).
};

// Where one sequence's blocks live: a list of physical block numbers, all on
// the GPU or (after a swap out) all in the CPU swap space.
struct BlockTable {
  std::vector<int> blocks;
  bool on_gpu = true;
  // Chained hash of each leading full block whose K/V has been computed
  // (hashes[i] covers blocks[i]); grows as CommitComputedBlocks sees them.
  std::vector<uint64_t> hashes;
  // Leading tokens found in the prefix cache when the table was allocated.
  int num_cached_tokens = 0;
};

// Hash of a full block: (hash of the previous block, or 0 for the first;
// the block's token ids). Injectable so tests can force collisions.
using BlockHasher = uint64_t (*)(uint64_t parent_hash, absl::Span<const int32_t> tokens);
uint64_t DefaultBlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens);

// One physical block moved or copied: GPU->CPU (swap out), CPU->GPU (swap in)
// or GPU->GPU (copy-on-write). Declared here rather than in scheduler.h so the
// block manager does not depend on the scheduler.
struct BlockMove {
  int src;
  int dst;
};

// The KV cache's metadata, as vLLM's v0 block manager keeps it
// (REFERENCE.md, "Block manager"): per-sequence block tables keyed by seq_id,
// ref counts shared through Fork, copy-on-write of a shared last block, and
// all-or-nothing swapping of a group that keeps sharing between its forked
// sequences. Knows nothing of CUDA or gRPC.
//
// The block manager reads sequences through kv_sequence.h and never changes
// them: a group operation applies to the group's sequences in one phase
// (waiting for Allocate, running for appends and SwapOut, swapped for
// SwapIn), and the scheduler sets their new status afterwards.
//
// Automatic prefix caching (when enabled): a full block is hashed, chained
// on its predecessor, once its K/V is computed (CommitComputedBlocks after
// each step); Allocate reuses the longest run of cached leading blocks whose
// tokens match, except that the block holding the prompt's last token is
// always computed afresh (the step must produce logits for it). Unreferenced
// cached blocks stay in the GPU pool's LRU evictor until a block is needed.
//
// Thread-compatible: only the engine thread uses it.
class BlockManager {
 public:
  // REQUIRES: block_size > 0, num_gpu_blocks >= 0, num_cpu_blocks >= 0,
  // 0 <= watermark < 1.
  BlockManager(int block_size, int num_gpu_blocks, int num_cpu_blocks, double watermark,
               bool enable_prefix_caching = false, BlockHasher hasher = &DefaultBlockHash);
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  // EAGLE heads (speculative methods eagle, eagle3), as vLLM's use_eagle:
  // a prefix-cache hit leaves its last matched block to be recomputed. The
  // head's K/V at a position is computed from the token after it, so that
  // of a hit's last position came from whatever token followed it in the
  // sequence that cached it; one block back, the token after the hit is in
  // a matched block, hence the same.
  void set_recompute_last_cached_block(bool on) { recompute_last_cached_block_ = on; }

  // Blocks needed to hold `num_tokens` tokens.
  int BlocksForTokens(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Whether the group's kWaiting sequences can get GPU blocks for all their
  // tokens: needed = their blocks (identical sequences share), wm =
  // int(watermark * G); kNever if G - needed < wm, kOk if free - needed >= wm,
  // else kLater.
  AllocStatus CanAllocate(const KvSequenceGroup& group) const {
    return CheckFits(BlocksForPrompts(group.SequencesIn(KvPhase::kWaiting)));
  }
  // Gives every kWaiting sequence of the group a table covering its length.
  // Waiting sequences with the same tokens share blocks (the fresh prompt
  // of parallel samples); others get their own, starting with prefix-cache
  // hits (table.num_cached_tokens says how many tokens need no computing),
  // unless the group SkipsPrefixCache.
  // REQUIRES: none of them has a table. RESOURCE_EXHAUSTED (and nothing
  // allocated) if blocks run out.
  absl::Status Allocate(const KvSequenceGroup& group);

  // Hashes and registers in the prefix cache the full blocks of seq whose
  // K/V are now computed (seq.num_computed_tokens()). Call after every step
  // for each scheduled sequence. No-op without prefix caching or table.
  void CommitComputedBlocks(const KvSequence& seq);

  // Whether every kRunning sequence of the group can grow to its length plus
  // its lookahead slots: the blocks that takes, and one more for each
  // sequence whose new token lands in a shared block. (vLLM v0 asks one per running sequence, which
  // preempts needlessly when the cache is full but no block is needed.)
  // Call it after the step's sampled tokens were appended to the sequences.
  bool CanAppendSlots(const KvSequenceGroup& group) const {
    return BlocksToAppendSlots(group) <= gpu_.num_free();
  }
  // The free blocks that growth would take (what CanAppendSlots weighs).
  int BlocksToAppendSlots(const KvSequenceGroup& group) const;
  // Extends seq's GPU table to cover seq.length() tokens plus its lookahead
  // slots. If the block that receives the new token is shared, copies it on write and returns the
  // (src, dst) pair the workers must copy before the forward pass.
  // REQUIRES: seq has a GPU table. RESOURCE_EXHAUSTED if no block is free.
  absl::StatusOr<std::optional<BlockMove>> AppendSlots(const KvSequence& seq);

  // Speculative decoding's rollback: drops the GPU blocks of seq's table
  // past those its length spans (the slots of rejected drafts, reserved as
  // lookahead slots), tail first. Such blocks hold no verified token, so
  // none of them is hashed. No-op without a GPU table.
  void TrimToLength(const KvSequence& seq);

  // The child shares all of the parent's blocks (ref counts +1, no copy).
  // REQUIRES: parent has a table and child has none.
  void Fork(const KvSequence& parent, const KvSequence& child);

  // Empties the prefix cache: the GPU K/V bytes are lost (a worker
  // restarted), so no block may serve a hit any more. Tables stay; their
  // computed full blocks are hashed again by later commits.
  void ResetPrefixCache();

  // KV events (kv_events.h): from now on every change to the set of
  // prefix-cached GPU blocks is recorded, in order, until SwapKvEvents.
  // Stored blocks of one commit share one BlockStored; consecutive
  // evictions one BlockRemoved. No-op without prefix caching.
  void EnableKvEvents();
  bool kv_events_enabled() const { return kv_events_enabled_; }
  // Swaps the events recorded since the last call (oldest first) with
  // `batch`, which must be empty and whose capacity the next events reuse.
  void SwapKvEvents(KvEventBatch& batch) { std::swap(kv_events_, batch); }
  // What a subscriber that lost events needs to hold the current state:
  // AllBlocksCleared, then one BlockStored per cached block.
  KvEventBatch CachedBlocksAsEvents() const;
  // The hashes the GPU pool can serve prefix hits from, in no order.
  std::vector<uint64_t> CachedBlockHashes() const { return gpu_.CachedHashes(); }

  // Drops the sequence's references (tail block first, so that a cached
  // chain is evicted from its tail) and its table. No-op if it has none.
  void Free(int64_t seq_id);

  // Whether the group's kSwapped sequences fit back on the GPU with one spare
  // block per sequence for its next token (same watermark rule as
  // CanAllocate).
  AllocStatus CanSwapIn(const KvSequenceGroup& group) const;
  // Moves the kSwapped sequences' blocks to the GPU: one new GPU block per
  // distinct CPU block, ref counts carried over. Returns CPU->GPU moves.
  absl::StatusOr<std::vector<BlockMove>> SwapIn(const KvSequenceGroup& group) {
    return Move(group.SequencesIn(KvPhase::kSwapped), /*to_gpu=*/true);
  }
  // Whether the CPU swap space holds the kRunning sequences' distinct blocks.
  bool CanSwapOut(const KvSequenceGroup& group) const;
  // Moves the kRunning sequences' blocks to the CPU, keeping sharing.
  // Returns GPU->CPU moves.
  absl::StatusOr<std::vector<BlockMove>> SwapOut(const KvSequenceGroup& group) {
    return Move(group.SequencesIn(KvPhase::kRunning), /*to_gpu=*/false);
  }

  // The sequence's table, or nullptr if it has none.
  const BlockTable* FindBlockTable(int64_t seq_id) const;
  // The sequence's physical blocks; empty if it has no table.
  const std::vector<int>& GetBlockTable(int64_t seq_id) const;
  const absl::flat_hash_map<int64_t, BlockTable>& block_tables() const { return tables_; }

  int block_size() const { return block_size_; }
  int num_free_gpu_blocks() const { return gpu_.num_free(); }
  int num_free_cpu_blocks() const { return cpu_.num_free(); }
  int watermark_blocks() const { return watermark_blocks_; }
  const BlockPool& gpu_pool() const { return gpu_; }
  const BlockPool& cpu_pool() const { return cpu_; }
  BlockHasher hasher() const { return hasher_; }
  // Prompt tokens looked up in the prefix cache, and those found (vLLM
  // counts both in tokens).
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }

 private:
  AllocStatus CheckFits(int needed) const;
  // Blocks a prompt allocation takes: a sequence with the same tokens as an
  // earlier one (a twin) shares that one's table.
  int BlocksForPrompts(absl::Span<const KvSequence* const> seqs) const;
  // What growing seq (holding `blocks`) to its length and lookahead slots
  // takes: new blocks, and whether its new token's block is shared.
  struct Growth {
    int new_blocks = 0;
    bool copy_on_write = false;
    int token_block = -1;  // Index of the held block the new token lands in.
  };
  Growth GrowthOf(const KvSequence& seq, const std::vector<int>& blocks) const;
  // Fills a fresh table for seq: cached leading blocks (unless not
  // `reuse_cached`), then new ones.
  BlockTable AllocateTable(const KvSequence& seq, bool reuse_cached);
  // Registers table.blocks[i] under table.hashes[i] for i in [from, size).
  void RegisterHashes(const KvSequence& seq, const BlockTable& table, int from);
  // Moves the tables of `seqs` from one pool to the other, one copy per
  // distinct physical block.
  absl::StatusOr<std::vector<BlockMove>> Move(absl::Span<const KvSequence* const> seqs,
                                              bool to_gpu);
  // Distinct physical blocks referenced by the tables of `seqs`.
  int CountDistinctBlocks(absl::Span<const KvSequence* const> seqs) const;

  int block_size_;
  int watermark_blocks_;
  bool enable_prefix_caching_;
  BlockHasher hasher_;
  bool recompute_last_cached_block_ = false;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  BlockPool gpu_;
  BlockPool cpu_;
  absl::flat_hash_map<int64_t, BlockTable> tables_;
  bool kv_events_enabled_ = false;
  KvEventBatch kv_events_;  // Since the last SwapKvEvents.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_BLOCK_MANAGER_H_

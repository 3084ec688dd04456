#ifndef PAGODA_SCHEDULER_KV_BLOCK_POOL_H_
#define PAGODA_SCHEDULER_KV_BLOCK_POOL_H_

// BlockPool: one device's numbered KV blocks with their reference counts,
// hashes and the LRU of evictable cached blocks.

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/kv_event_types/kv_events.h"

namespace pagoda::scheduler {

// Pool of `num_blocks` physical KV blocks numbered from 0 (one for the GPU,
// one for the CPU swap space), with per-block metadata: ref count, content
// hash (set once the block is full and its K/V computed) and last use.
// Metadata only: it never touches KV bytes.
//
// A block is in exactly one of three states:
//   used       ref count > 0;
//   free       ref count 0, no hash: in the free list;
//   evictable  ref count 0, hashed: in the LRU evictor, its K/V still valid
//              and findable by hash until Allocate() needs the block.
// num_free() = free + evictable. Free blocks are handed out from the front of
// the free list and a released block goes back to the front (vLLM v0 order);
// only when the free list is empty is the least recently used evictable
// block evicted (its hash forgotten) and handed out.
//
// Thread-compatible: only the engine thread uses it.
class BlockPool {
 public:
  explicit BlockPool(int num_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Takes the first free block (else evicts the LRU evictable one) with ref
  // count 1 and no hash. RESOURCE_EXHAUSTED when num_free() == 0.
  absl::StatusOr<int> Allocate();
  // The block registered under `hash` whose tokens equal `tokens` (a hash
  // collision is a miss), with one more reference (out of the evictor if it
  // was there); nullopt on a miss.
  std::optional<int> AllocateCached(uint64_t hash, absl::Span<const int32_t> tokens);
  // Adds a reference to a used block. REQUIRES: ref_count(block) > 0.
  void AddReference(int block);
  // Drops one reference; at 0 the block becomes evictable if hashed, else
  // free. REQUIRES: ref_count(block) > 0.
  void Release(int block);
  // Registers a used, full, computed block under `hash` with its tokens.
  // Returns false (and changes nothing) if the block already has a hash or
  // another block holds this hash (the first copy stays the cached one).
  // `parent` is the hash of the block before it in its sequence (none for a
  // first block) and `lora_id` its sequence's adapter (0: the base model),
  // kept for CachedBlocksAsEvents.
  bool SetHash(int block, uint64_t hash, absl::Span<const int32_t> tokens,
               std::optional<uint64_t> parent = std::nullopt, int lora_id = 0);

  // Forgets every hash (the K/V bytes are gone, e.g. a worker restarted):
  // evictable blocks become free, used ones stay used but unfindable.
  void ForgetCachedContents();

  // Where evictions (BlockRemoved) and ForgetCachedContents
  // (AllBlocksCleared) are recorded, in order with the owner's own events;
  // null (the default) records nothing. `log` must outlive the pool.
  void set_event_log(KvEventBatch* log) { event_log_ = log; }
  // Appends every hashed block to `batch` as one BlockStored of its own, in
  // no order (parents need not come first).
  void AppendCachedBlocks(int block_size, KvEventBatch& batch) const;
  // The hashes blocks are findable under, in no order.
  std::vector<uint64_t> CachedHashes() const;

  int ref_count(int block) const { return blocks_[block].ref_count; }
  std::optional<uint64_t> hash(int block) const;
  // REQUIRES: hash(block) has a value.
  const std::vector<int32_t>& tokens(int block) const { return blocks_[block].cached->tokens; }
  bool is_evictable(int block) const { return ref_count(block) == 0 && hash(block).has_value(); }
  int num_free() const { return static_cast<int>(free_list_.size() + evictor_.size()); }
  int num_evictable() const { return static_cast<int>(evictor_.size()); }
  int num_total() const { return static_cast<int>(blocks_.size()); }
  int num_cached() const { return static_cast<int>(hash_to_block_.size()); }
  // Front = next block handed out. For invariant checks and tests.
  const std::deque<int>& free_list() const { return free_list_; }

 private:
  // What a hashed block remembers of its contents.
  struct Contents {
    uint64_t hash;
    std::vector<int32_t> tokens;  // For collision checks.
    std::optional<uint64_t> parent_hash;
    int lora_id;
  };
  struct Block {
    int ref_count = 0;
    uint64_t last_use = 0;           // Tick of the last Release.
    std::optional<Contents> cached;  // Set while hashed.
  };
  // Forgets the hash of an evictable or used block.
  void Unhash(int block);

  std::vector<Block> blocks_;
  std::deque<int> free_list_;
  // (last_use, block): begin() is the least recently used. A table is freed
  // tail first, so its tail gets the older tick and is evicted first.
  std::set<std::pair<uint64_t, int>> evictor_;
  absl::flat_hash_map<uint64_t, int> hash_to_block_;
  uint64_t tick_ = 0;
  KvEventBatch* event_log_ = nullptr;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_BLOCK_POOL_H_

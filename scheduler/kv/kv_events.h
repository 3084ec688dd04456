#ifndef PAGODA_SCHEDULER_KV_KV_EVENTS_H_
#define PAGODA_SCHEDULER_KV_KV_EVENTS_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace pagoda::scheduler {

// A change to the set of prefix-cached blocks, as vLLM's KV events name them
// (vllm/distributed/kv_events.py): a subscriber that applies every event in
// order holds exactly the set of block hashes the GPU pool can serve hits
// from. Hashes are the block manager's chained 64-bit block hashes.
struct KvCacheEvent {
  enum class Kind {
    kBlockStored,       // block_hashes became findable; parent_hash, token_ids, block_size set.
    kBlockRemoved,      // block_hashes were evicted.
    kAllBlocksCleared,  // Every hash was forgotten (a worker restarted).
  };
  Kind kind = Kind::kBlockStored;
  std::vector<uint64_t> block_hashes;
  // The hash of the block before the first of block_hashes; none for a
  // prompt's first block.
  std::optional<uint64_t> parent_hash;
  // Tokens of every stored block, block after block.
  std::vector<int32_t> token_ids;
  int block_size = 0;
};

// Where the engine hands each step's events (the KV event publisher).
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  // Called on the engine thread, at most once per step, with the step's
  // events in order; must not block. False when the sink cannot take them
  // (its queue is full): they are dropped, and the engine sends
  // CachedBlocksAsEvents (a full resync) once the sink takes batches again.
  virtual bool TryPublish(std::vector<KvCacheEvent> events) = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_KV_EVENTS_H_

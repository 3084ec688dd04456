#ifndef PAGODA_SCHEDULER_KV_EVENT_TYPES_KV_EVENTS_H_
#define PAGODA_SCHEDULER_KV_EVENT_TYPES_KV_EVENTS_H_

// KV cache events (vLLM's BlockStored, BlockRemoved, AllBlocksCleared) in a
// wire-neutral form, and the sink the engine hands them to, for prefix-aware
// routers. The block manager records them (kv/) and the publisher sends them
// (kv_events/); this room knows neither, so both arrows point here.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace pagoda::scheduler {

// A change to the set of prefix-cached blocks, as vLLM's KV events name them
// (vllm/distributed/kv_events.py): a subscriber that applies every event in
// order holds exactly the set of block hashes the GPU pool can serve hits
// from. Hashes are the block manager's chained 64-bit block hashes.
enum class KvEventKind {
  kBlockStored,       // Hashes became findable; parent, tokens and block size set.
  kBlockRemoved,      // Hashes were evicted.
  kAllBlocksCleared,  // Every hash was forgotten (a worker restarted).
};

// The events of one engine step, in order, kept flat: every event's hashes
// and tokens are ranges of two shared arrays, so recording an event costs no
// allocation of its own. Batches are recycled between the engine and the
// publisher (KvEventSink::TryPublish), so that once their arrays have grown
// to a step's size the engine thread allocates nothing for its events: a
// fresh array of 1 KiB or more costs glibc a consolidation of every small
// chunk the step freed, which measured ~15 us per step at 256 sequences.
class KvEventBatch {
 public:
  struct Event {
    KvEventKind kind;
    uint32_t first_hash = 0;
    uint32_t num_hashes = 0;
    uint32_t first_token = 0;
    uint32_t num_tokens = 0;
    std::optional<uint64_t> parent_hash;  // BlockStored only.
    int block_size = 0;                   // BlockStored only.
    int lora_id = 0;                      // BlockStored only; 0: the base model.
  };

  // Starts a BlockStored; AppendStoredBlock adds its blocks.
  void AddStored(std::optional<uint64_t> parent_hash, int block_size, int lora_id = 0) {
    events_.push_back(Event{KvEventKind::kBlockStored, Hashes(), 0, Tokens(), 0, parent_hash,
                            block_size, lora_id});
  }
  // REQUIRES: the last event is a BlockStored.
  void AppendStoredBlock(uint64_t hash, absl::Span<const int32_t> tokens) {
    hashes_.push_back(hash);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    events_.back().num_hashes += 1;
    events_.back().num_tokens += static_cast<uint32_t>(tokens.size());
  }
  // Consecutive removals share one BlockRemoved.
  void AddRemoved(uint64_t hash) {
    if (events_.empty() || events_.back().kind != KvEventKind::kBlockRemoved) {
      events_.push_back(Event{KvEventKind::kBlockRemoved, Hashes(), 0, Tokens(), 0, {}, 0});
    }
    hashes_.push_back(hash);
    events_.back().num_hashes += 1;
  }
  void AddCleared() {
    events_.push_back(Event{KvEventKind::kAllBlocksCleared, Hashes(), 0, Tokens(), 0, {}, 0});
  }

  bool empty() const { return events_.empty(); }
  size_t size() const { return events_.size(); }
  const std::vector<Event>& events() const { return events_; }
  absl::Span<const uint64_t> hashes(const Event& event) const {
    return absl::MakeConstSpan(hashes_).subspan(event.first_hash, event.num_hashes);
  }
  absl::Span<const int32_t> tokens(const Event& event) const {
    return absl::MakeConstSpan(tokens_).subspan(event.first_token, event.num_tokens);
  }

  // Empties the batch and keeps its arrays' capacity for reuse.
  void Clear() {
    events_.clear();
    hashes_.clear();
    tokens_.clear();
  }
  // Bytes the arrays hold allocated.
  size_t capacity_bytes() const {
    return events_.capacity() * sizeof(Event) + hashes_.capacity() * sizeof(uint64_t) +
           tokens_.capacity() * sizeof(int32_t);
  }

 private:
  uint32_t Hashes() const { return static_cast<uint32_t>(hashes_.size()); }
  uint32_t Tokens() const { return static_cast<uint32_t>(tokens_.size()); }

  std::vector<Event> events_;
  std::vector<uint64_t> hashes_;
  std::vector<int32_t> tokens_;
};

// Where the engine hands each step's events (the KV event publisher).
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  // Called on the engine thread, at most once per step, with the step's
  // events in order; must not block. On success takes them and leaves in
  // `events` an empty batch, one it already sent, to be filled again. False
  // when the sink cannot take them (its queue is full): `events` is left as
  // it was, the engine drops them and sends
  // BlockManager::CachedBlocksAsEvents (a full resync) once the sink takes
  // batches again.
  virtual bool TryPublish(KvEventBatch& events) = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_EVENT_TYPES_KV_EVENTS_H_

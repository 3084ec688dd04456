#ifndef PAGODA_TESTS_SUPPORT_KV_EVENT_LIST_H_
#define PAGODA_TESTS_SUPPORT_KV_EVENT_LIST_H_

// KV cache events one by one, each with its own arrays, for tests that
// compare what the block manager or the publisher recorded: the product keeps
// them flat (KvEventBatch, scheduler/kv_event_types/kv_events.h).

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "scheduler/kv/block_manager.h"
#include "scheduler/kv_event_types/kv_events.h"

namespace pagoda::scheduler {

// One event with its own arrays.
struct KvCacheEvent {
  using Kind = KvEventKind;
  Kind kind = Kind::kBlockStored;
  std::vector<uint64_t> block_hashes;
  // The hash of the block before the first of block_hashes; none for a
  // prompt's first block.
  std::optional<uint64_t> parent_hash;
  // Tokens of every stored block, block after block.
  std::vector<int32_t> token_ids;
  int block_size = 0;
  std::optional<int> lora_id;  // BlockStored of an adapter's blocks; none for the base model.
};

// `batch`'s events, in order.
inline std::vector<KvCacheEvent> ToEvents(const KvEventBatch& batch) {
  std::vector<KvCacheEvent> out;
  for (const KvEventBatch::Event& event : batch.events()) {
    const absl::Span<const uint64_t> hashes = batch.hashes(event);
    const absl::Span<const int32_t> tokens = batch.tokens(event);
    out.push_back(
        KvCacheEvent{event.kind,
                     {hashes.begin(), hashes.end()},
                     event.parent_hash,
                     {tokens.begin(), tokens.end()},
                     event.block_size,
                     event.lora_id != 0 ? std::optional<int>(event.lora_id) : std::nullopt});
  }
  return out;
}

// The events `manager` recorded since the last call, as a list.
inline std::vector<KvCacheEvent> TakeKvEvents(BlockManager& manager) {
  KvEventBatch batch;
  manager.SwapKvEvents(batch);
  return ToEvents(batch);
}

}  // namespace pagoda::scheduler

#endif  // PAGODA_TESTS_SUPPORT_KV_EVENT_LIST_H_

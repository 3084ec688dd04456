#include "scheduler/kv/block_pool.h"

#include <algorithm>

#include "absl/status/status.h"
#include "glog/logging.h"

namespace pagoda::scheduler {

BlockPool::BlockPool(int num_blocks) : blocks_(num_blocks) {
  for (int block = 0; block < num_blocks; ++block) free_list_.push_back(block);
}

absl::StatusOr<int> BlockPool::Allocate() {
  int block;
  if (!free_list_.empty()) {
    block = free_list_.front();
    free_list_.pop_front();
  } else if (!evictor_.empty()) {
    block = evictor_.begin()->second;
    evictor_.erase(evictor_.begin());
    Unhash(block);
  } else {
    return absl::ResourceExhaustedError("no free KV block");
  }
  blocks_[block].ref_count = 1;
  return block;
}

std::optional<int> BlockPool::AllocateCached(uint64_t hash, absl::Span<const int32_t> tokens) {
  auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return std::nullopt;
  Block& block = blocks_[it->second];
  if (!std::equal(tokens.begin(), tokens.end(), block.tokens.begin(), block.tokens.end())) {
    return std::nullopt;  // A collision: another prefix under the same hash.
  }
  if (block.ref_count == 0) evictor_.erase({block.last_use, it->second});
  ++block.ref_count;
  return it->second;
}

void BlockPool::AddReference(int block) {
  CHECK_GT(blocks_.at(block).ref_count, 0) << "reference to free block " << block;
  ++blocks_[block].ref_count;
}

void BlockPool::Release(int block) {
  Block& entry = blocks_.at(block);
  CHECK_GT(entry.ref_count, 0) << "double free of block " << block;
  if (--entry.ref_count > 0) return;
  entry.last_use = ++tick_;
  if (entry.hash.has_value()) {
    evictor_.insert({entry.last_use, block});
  } else {
    free_list_.push_front(block);
  }
}

bool BlockPool::SetHash(int block, uint64_t hash, absl::Span<const int32_t> tokens,
                        std::optional<uint64_t> parent) {
  Block& entry = blocks_.at(block);
  CHECK_GT(entry.ref_count, 0) << "hashing free block " << block;
  if (entry.hash.has_value() || hash_to_block_.contains(hash)) return false;
  entry.hash = hash;
  entry.tokens.assign(tokens.begin(), tokens.end());
  entry.parent_hash = parent;
  hash_to_block_[hash] = block;
  return true;
}

void BlockPool::ForgetCachedContents() {
  for (const auto& [last_use, block] : evictor_) free_list_.push_back(block);
  evictor_.clear();
  for (Block& block : blocks_) {
    block.hash.reset();
    block.tokens.clear();
    block.parent_hash.reset();
  }
  hash_to_block_.clear();
  if (event_log_ != nullptr) {
    KvCacheEvent cleared;
    cleared.kind = KvCacheEvent::Kind::kAllBlocksCleared;
    event_log_->push_back(std::move(cleared));
  }
}

std::vector<KvCacheEvent> BlockPool::CachedBlocksAsEvents(int block_size) const {
  std::vector<KvCacheEvent> events;
  events.reserve(hash_to_block_.size());
  for (const auto& [hash, block] : hash_to_block_) {
    KvCacheEvent stored;
    stored.block_hashes = {hash};
    stored.parent_hash = blocks_[block].parent_hash;
    stored.token_ids = blocks_[block].tokens;
    stored.block_size = block_size;
    events.push_back(std::move(stored));
  }
  return events;
}

std::vector<uint64_t> BlockPool::CachedHashes() const {
  std::vector<uint64_t> hashes;
  hashes.reserve(hash_to_block_.size());
  for (const auto& [hash, block] : hash_to_block_) hashes.push_back(hash);
  return hashes;
}

bool BlockPool::is_evictable(int block) const {
  return blocks_[block].ref_count == 0 && blocks_[block].hash.has_value();
}

void BlockPool::Unhash(int block) {
  Block& entry = blocks_[block];
  hash_to_block_.erase(*entry.hash);
  if (event_log_ != nullptr) {
    // Consecutive evictions share one BlockRemoved.
    if (event_log_->empty() || event_log_->back().kind != KvCacheEvent::Kind::kBlockRemoved) {
      KvCacheEvent removed;
      removed.kind = KvCacheEvent::Kind::kBlockRemoved;
      event_log_->push_back(std::move(removed));
    }
    event_log_->back().block_hashes.push_back(*entry.hash);
  }
  entry.hash.reset();
  entry.tokens.clear();
  entry.parent_hash.reset();
}

}  // namespace pagoda::scheduler

#include "scheduler/kv/block_pool.h"

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
  if (tokens != absl::MakeConstSpan(block.cached->tokens)) {
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
  if (entry.cached.has_value()) {
    evictor_.insert({entry.last_use, block});
  } else {
    free_list_.push_front(block);
  }
}

bool BlockPool::SetHash(int block, uint64_t hash, absl::Span<const int32_t> tokens,
                        std::optional<uint64_t> parent, int lora_id) {
  Block& entry = blocks_.at(block);
  CHECK_GT(entry.ref_count, 0) << "hashing free block " << block;
  if (entry.cached.has_value() || hash_to_block_.contains(hash)) return false;
  entry.cached = Contents{hash, {tokens.begin(), tokens.end()}, parent, lora_id};
  hash_to_block_[hash] = block;
  return true;
}

void BlockPool::ForgetCachedContents() {
  for (const auto& [last_use, block] : evictor_) free_list_.push_back(block);
  evictor_.clear();
  for (Block& block : blocks_) block.cached.reset();
  hash_to_block_.clear();
  if (event_log_ != nullptr) event_log_->AddCleared();
}

void BlockPool::AppendCachedBlocks(int block_size, KvEventBatch& batch) const {
  for (const auto& [hash, block] : hash_to_block_) {
    const Contents& cached = *blocks_[block].cached;
    batch.AddStored(cached.parent_hash, block_size, cached.lora_id);
    batch.AppendStoredBlock(hash, cached.tokens);
  }
}

std::vector<uint64_t> BlockPool::CachedHashes() const {
  std::vector<uint64_t> hashes;
  hashes.reserve(hash_to_block_.size());
  for (const auto& [hash, block] : hash_to_block_) hashes.push_back(hash);
  return hashes;
}

std::optional<uint64_t> BlockPool::hash(int block) const {
  const std::optional<Contents>& cached = blocks_[block].cached;
  return cached.has_value() ? std::optional<uint64_t>(cached->hash) : std::nullopt;
}

void BlockPool::Unhash(int block) {
  const uint64_t hash = blocks_[block].cached->hash;
  hash_to_block_.erase(hash);
  if (event_log_ != nullptr) event_log_->AddRemoved(hash);
  blocks_[block].cached.reset();
}

}  // namespace pagoda::scheduler

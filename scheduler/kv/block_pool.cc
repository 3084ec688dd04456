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
                        std::optional<uint64_t> parent, int lora_id) {
  Block& entry = blocks_.at(block);
  CHECK_GT(entry.ref_count, 0) << "hashing free block " << block;
  if (entry.hash.has_value() || hash_to_block_.contains(hash)) return false;
  entry.hash = hash;
  entry.tokens.assign(tokens.begin(), tokens.end());
  entry.parent_hash = parent;
  entry.lora_id = lora_id;
  hash_to_block_[hash] = block;
  return true;
}

void BlockPool::ForgetCachedContents() {
  for (const auto& [last_use, block] : evictor_) free_list_.push_back(block);
  evictor_.clear();
  for (Block& block : blocks_) ForgetContents(block);
  hash_to_block_.clear();
  if (event_log_ != nullptr) event_log_->AddCleared();
}

void BlockPool::AppendCachedBlocks(int block_size, KvEventBatch& batch) const {
  for (const auto& [hash, block] : hash_to_block_) {
    batch.AddStored(blocks_[block].parent_hash, block_size, blocks_[block].lora_id);
    batch.AppendStoredBlock(hash, blocks_[block].tokens);
  }
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
  if (event_log_ != nullptr) event_log_->AddRemoved(*entry.hash);
  ForgetContents(entry);
}

void BlockPool::ForgetContents(Block& block) {
  block.hash.reset();
  block.tokens.clear();
  block.parent_hash.reset();
  block.lora_id = 0;
}

}  // namespace pagoda::scheduler

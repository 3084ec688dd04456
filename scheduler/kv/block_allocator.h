#ifndef PAGODA_SCHEDULER_KV_BLOCK_ALLOCATOR_H_
#define PAGODA_SCHEDULER_KV_BLOCK_ALLOCATOR_H_

#include <deque>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::scheduler {

// Reference-counted pool of `num_blocks` physical KV blocks numbered from 0
// (one pool for the GPU, one for the CPU swap space). Metadata only: it never
// touches KV bytes.
//
// Free blocks are handed out from the front of the free list, and a block
// whose count drops to 0 goes back to the front, so the most recently freed
// block is reused first (vLLM v0 order). Prefix caching will route
// unreferenced cached blocks to an evictor instead of the free list.
//
// Thread-compatible: only the engine thread uses it.
class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;
  BlockAllocator(BlockAllocator&&) = default;
  BlockAllocator& operator=(BlockAllocator&&) = default;

  // Takes the first free block and sets its ref count to 1.
  // RESOURCE_EXHAUSTED when no block is free.
  absl::StatusOr<int> Allocate();
  // Adds a reference to an allocated block. REQUIRES: ref_count(block) > 0.
  void AddReference(int block);
  // Drops one reference; at 0 the block returns to the front of the free list.
  // REQUIRES: ref_count(block) > 0.
  void Release(int block);

  int ref_count(int block) const { return ref_counts_[block]; }
  int num_free() const { return static_cast<int>(free_list_.size()); }
  int num_total() const { return static_cast<int>(ref_counts_.size()); }
  // Front = next block handed out. For invariant checks and tests.
  const std::deque<int>& free_list() const { return free_list_; }

 private:
  std::deque<int> free_list_;
  std::vector<int> ref_counts_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_BLOCK_ALLOCATOR_H_

#include "scheduler/kv/block_allocator.h"

#include "absl/status/status.h"
#include "glog/logging.h"

namespace pagoda::scheduler {

BlockAllocator::BlockAllocator(int num_blocks) : ref_counts_(num_blocks, 0) {
  for (int block = 0; block < num_blocks; ++block) free_list_.push_back(block);
}

absl::StatusOr<int> BlockAllocator::Allocate() {
  if (free_list_.empty()) return absl::ResourceExhaustedError("no free KV block");
  const int block = free_list_.front();
  free_list_.pop_front();
  ref_counts_[block] = 1;
  return block;
}

void BlockAllocator::AddReference(int block) {
  CHECK_GT(ref_counts_.at(block), 0) << "reference to free block " << block;
  ++ref_counts_[block];
}

void BlockAllocator::Release(int block) {
  CHECK_GT(ref_counts_.at(block), 0) << "double free of block " << block;
  if (--ref_counts_[block] == 0) free_list_.push_front(block);
}

}  // namespace pagoda::scheduler

#include "scheduler/engine/kv_slot_usage.h"

#include <algorithm>
#include <vector>

namespace pagoda::scheduler {

KvSlotUsage KvSlotUsageMeter::Measure(const Scheduler& scheduler) {
  const BlockManager& blocks = scheduler.block_manager();
  const int block_size = blocks.block_size();
  tokens_in_block_.resize(blocks.gpu_pool().num_total(), -1);
  touched_.clear();
  // Each block holds the most tokens any sequence sharing it has there.
  scheduler.ForEachGroup([&](const SequenceGroup& group, SequenceStatus queue) {
    if (queue != SequenceStatus::kRunning) return;
    for (const auto& seq : group.seqs()) {
      if (seq->status() != SequenceStatus::kRunning) continue;
      const std::vector<int>& table = blocks.GetBlockTable(seq->seq_id());
      for (size_t i = 0; i < table.size(); ++i) {
        const int tokens = std::clamp(seq->num_computed_tokens() - static_cast<int>(i) * block_size,
                                      0, block_size);
        int& filled = tokens_in_block_.at(table[i]);
        if (filled < 0) touched_.push_back(table[i]);
        filled = std::max(filled, tokens);
      }
    }
  });
  KvSlotUsage usage;
  for (const int block : touched_) {
    usage.allocated_slots += block_size;
    usage.filled_slots += tokens_in_block_[block];
    tokens_in_block_[block] = -1;
  }
  return usage;
}

}  // namespace pagoda::scheduler

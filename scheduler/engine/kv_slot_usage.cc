#include "scheduler/engine/kv_slot_usage.h"

#include <algorithm>
#include <vector>

namespace pagoda::scheduler {

KvSlotUsage ComputeKvSlotUsage(const Scheduler& scheduler) {
  const BlockManager& blocks = scheduler.block_manager();
  const int block_size = blocks.block_size();
  // Tokens in each physical block (-1: no running sequence holds it): the
  // most any sequence sharing it has there. Indexed by block id, not hashed:
  // a full batch holds tens of thousands of blocks.
  std::vector<int> tokens_in_block(blocks.gpu_pool().num_total(), -1);
  scheduler.ForEachGroup([&](const SequenceGroup& group, SequenceStatus queue) {
    if (queue != SequenceStatus::kRunning) return;
    for (const Sequence* seq : group.SeqsWithStatus(SequenceStatus::kRunning)) {
      const std::vector<int>& table = blocks.GetBlockTable(seq->seq_id());
      for (size_t i = 0; i < table.size(); ++i) {
        const int tokens = std::clamp(seq->num_computed_tokens() - static_cast<int>(i) * block_size,
                                      0, block_size);
        int& filled = tokens_in_block.at(table[i]);
        filled = std::max(filled, tokens);
      }
    }
  });
  KvSlotUsage usage;
  for (int tokens : tokens_in_block) {
    if (tokens < 0) continue;
    usage.allocated_slots += block_size;
    usage.filled_slots += tokens;
  }
  return usage;
}

}  // namespace pagoda::scheduler

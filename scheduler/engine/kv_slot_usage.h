#ifndef PAGODA_SCHEDULER_ENGINE_KV_SLOT_USAGE_H_
#define PAGODA_SCHEDULER_ENGINE_KV_SLOT_USAGE_H_

// KvSlotUsage: how full the running sequences' KV blocks are, a figure the
// engine publishes with its totals (engine_stats.h) and the simulator
// reports. Read from the scheduler between steps; the scheduler never
// needs it.

#include <cstdint>
#include <vector>

#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

// KV slots of the GPU blocks that running sequences hold, and how many of
// them hold a computed token: filled / allocated is the vLLM paper's Fig. 2
// figure (internal fragmentation and reservation waste), live.
struct KvSlotUsage {
  int64_t filled_slots = 0;
  int64_t allocated_slots = 0;
};

// Measures KvSlotUsage. A block shared by forked sequences counts once.
// Keeps its scratch between calls and clears only the blocks it touched, so
// a call is O(blocks held), not O(cache size): a CPU cache of a few GiB
// holds a million blocks.
class KvSlotUsageMeter {
 public:
  KvSlotUsage Measure(const Scheduler& scheduler);

 private:
  // Tokens in each block id (-1: not seen; all -1 between calls), indexed
  // by block id rather than hashed: a full batch holds tens of thousands.
  std::vector<int> tokens_in_block_;
  std::vector<int> touched_;  // The ids this call set.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_KV_SLOT_USAGE_H_

#ifndef PAGODA_SCHEDULER_ENGINE_KV_SLOT_USAGE_H_
#define PAGODA_SCHEDULER_ENGINE_KV_SLOT_USAGE_H_

// KvSlotUsage: how full the running sequences' KV blocks are, a figure the
// engine publishes with its totals (engine_stats.h) and the simulator
// reports. Read from the scheduler between steps; the scheduler never
// needs it.

#include <cstdint>

#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

// KV slots of the GPU blocks that running sequences hold, and how many of
// them hold a computed token: filled / allocated is the vLLM paper's Fig. 2
// figure (internal fragmentation and reservation waste), live.
struct KvSlotUsage {
  int64_t filled_slots = 0;
  int64_t allocated_slots = 0;
};

// A block shared by forked sequences counts once. O(blocks held): call once
// a step.
KvSlotUsage ComputeKvSlotUsage(const Scheduler& scheduler);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_KV_SLOT_USAGE_H_

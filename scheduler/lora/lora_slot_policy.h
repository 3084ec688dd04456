// Which adapters a step may run, and in which worker slot: the pure policy
// the scheduler calls once per step. A step holds at most --max-loras
// distinct adapters (one per slot); a resident adapter keeps its slot; a new
// one takes a free slot, else the least recently used slot whose adapter is
// neither in this step nor in the step still in flight; and a waiting
// request deferred for lack of a slot is never overtaken by a later waiting
// request for another adapter, so it cannot starve.
#ifndef PAGODA_SCHEDULER_LORA_LORA_SLOT_POLICY_H_
#define PAGODA_SCHEDULER_LORA_LORA_SLOT_POLICY_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace pagoda::lora {

// One worker slot (1..--max-loras are index 0..N-1 of the vector).
struct LoraSlotState {
  int adapter_id = 0;     // 0: empty.
  int64_t last_used = 0;  // The last step that ran it.
  bool operator==(const LoraSlotState&) const = default;
};

// A request the scheduler would run this step, in its order: the running
// ones first, then the waiting ones by arrival (or priority).
struct LoraCandidate {
  int adapter_id = 0;  // 0: the base model.
  bool running = false;
};

struct LoraSlotPlan {
  // Per candidate: the worker slot its rows use (SequenceStep.lora_slot):
  // 0 for the base model, 1..N for an adapter, -1 when it must wait.
  std::vector<int> slot_of;
  // (slot 1..N, adapter id) to load into the worker before the step runs.
  std::vector<std::pair<int, int>> loads;
  // The slots once the loads are done, last_used stamped with `step`.
  std::vector<LoraSlotState> slots;
};

// The plan for `step`. `in_flight`: the adapters of a step the worker may
// still be running (overlapped scheduling); their slots are neither evicted
// nor reloaded. Deterministic; ties in last_used go to the lower slot.
LoraSlotPlan PlanLoraSlots(const std::vector<LoraSlotState>& slots,
                           const std::vector<LoraCandidate>& candidates,
                           const absl::flat_hash_set<int>& in_flight, int64_t step);

// Empties the slot holding `adapter_id` (an unloaded adapter); returns its
// slot (1..N), or 0 when it held none.
int ReleaseLoraSlot(std::vector<LoraSlotState>& slots, int adapter_id);

}  // namespace pagoda::lora

#endif  // PAGODA_SCHEDULER_LORA_LORA_SLOT_POLICY_H_

#include "scheduler/lora/lora_slot_policy.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace pagoda::lora {
namespace {

// The walk over the candidates: which adapters are admitted, counting the
// slots they need.
class Admission {
 public:
  Admission(const std::vector<LoraSlotState>& slots, const absl::flat_hash_set<int>& in_flight)
      : capacity_(static_cast<int>(slots.size())) {
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].adapter_id == 0) continue;
      resident_[slots[s].adapter_id] = static_cast<int>(s);
      if (in_flight.contains(slots[s].adapter_id)) reserved_.insert(static_cast<int>(s));
    }
  }

  // True when `adapter` runs this step (admitting it if a slot allows).
  bool Admit(int adapter) {
    if (admitted_.contains(adapter)) return true;
    auto it = resident_.find(adapter);
    const bool has_reserved_slot = it != resident_.end() && reserved_.contains(it->second);
    if (!has_reserved_slot && SlotsTaken() + 1 > capacity_) return false;
    admitted_.insert(adapter);
    if (it != resident_.end()) {
      reserved_.insert(it->second);
    } else {
      newcomers_.push_back(adapter);
    }
    return true;
  }

  const absl::flat_hash_map<int, int>& resident() const { return resident_; }
  const absl::flat_hash_set<int>& reserved() const { return reserved_; }
  const absl::flat_hash_set<int>& admitted() const { return admitted_; }
  const std::vector<int>& newcomers() const { return newcomers_; }

 private:
  int SlotsTaken() const { return static_cast<int>(reserved_.size() + newcomers_.size()); }

  int capacity_;
  absl::flat_hash_map<int, int> resident_;  // adapter -> slot index.
  absl::flat_hash_set<int> reserved_;       // Slot indices kept this step.
  absl::flat_hash_set<int> admitted_;
  std::vector<int> newcomers_;  // Admitted adapters without a slot yet, in order.
};

// Slots for the newcomers: empty ones first, then the least recently used
// of those not reserved.
std::vector<int> VictimSlots(const std::vector<LoraSlotState>& slots,
                             const absl::flat_hash_set<int>& reserved, size_t needed) {
  std::vector<int> order;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (!reserved.contains(static_cast<int>(s))) order.push_back(static_cast<int>(s));
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const bool a_empty = slots[a].adapter_id == 0, b_empty = slots[b].adapter_id == 0;
    if (a_empty != b_empty) return a_empty;
    return slots[a].last_used < slots[b].last_used;
  });
  order.resize(std::min(order.size(), needed));
  return order;
}

}  // namespace

LoraSlotPlan PlanLoraSlots(const std::vector<LoraSlotState>& slots,
                           const std::vector<LoraCandidate>& candidates,
                           const absl::flat_hash_set<int>& in_flight, int64_t step) {
  Admission admission(slots, in_flight);
  LoraSlotPlan plan;
  plan.slot_of.assign(candidates.size(), -1);
  bool waiting_deferred = false;
  std::vector<size_t> admitted_candidates;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const LoraCandidate& candidate = candidates[i];
    if (candidate.adapter_id == 0) {
      plan.slot_of[i] = 0;
      continue;
    }
    // No overtaking: behind a deferred waiting request, waiting requests for
    // adapters wait too, so the slots that drain go to the oldest first.
    const bool blocked = !candidate.running && waiting_deferred;
    if (!blocked && admission.Admit(candidate.adapter_id)) {
      admitted_candidates.push_back(i);
    } else if (!candidate.running) {
      waiting_deferred = true;
    }
  }
  plan.slots = slots;
  const std::vector<int> victims =
      VictimSlots(slots, admission.reserved(), admission.newcomers().size());
  absl::flat_hash_map<int, int> slot_index = admission.resident();
  for (size_t n = 0; n < admission.newcomers().size(); ++n) {
    const int adapter = admission.newcomers()[n];
    plan.slots[victims[n]].adapter_id = adapter;
    plan.loads.emplace_back(victims[n] + 1, adapter);
    slot_index[adapter] = victims[n];
  }
  for (int adapter : admission.admitted()) plan.slots[slot_index[adapter]].last_used = step;
  for (size_t i : admitted_candidates) {
    plan.slot_of[i] = slot_index[candidates[i].adapter_id] + 1;
  }
  return plan;
}

int ReleaseLoraSlot(std::vector<LoraSlotState>& slots, int adapter_id) {
  for (size_t s = 0; s < slots.size(); ++s) {
    if (adapter_id != 0 && slots[s].adapter_id == adapter_id) {
      slots[s] = LoraSlotState{};
      return static_cast<int>(s) + 1;
    }
  }
  return 0;
}

}  // namespace pagoda::lora

#include "scheduler/engine/lora_step.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pagoda::scheduler {

LoraStepper::LoraStepper(int max_loras, const lora::LoraRegistry* registry, WorkerGroup* workers)
    : registry_(registry),
      slots_(max_loras),
      ready_(max_loras, false),
      generation_(max_loras, 0),
      loader_(workers) {
  CHECK_GT(max_loras, 0);
}

void LoraStepper::BeforeSchedule(Scheduler& scheduler, bool step_in_flight) {
  ApplyForgets(step_in_flight);
  std::vector<lora::LoraCandidate> candidates;
  std::vector<const SequenceGroup*> waiting;  // Candidate index - first_waiting.
  size_t first_waiting = 0;
  scheduler.ForEachGroup([&](const SequenceGroup& group, SequenceStatus queue) {
    if (queue == SequenceStatus::kWaiting) {
      if (waiting.empty()) first_waiting = candidates.size();
      waiting.push_back(&group);
    }
    candidates.push_back({group.lora_id(), queue != SequenceStatus::kWaiting});
  });
  const absl::flat_hash_set<int> no_step;
  const lora::LoraSlotPlan plan =
      lora::PlanLoraSlots(slots_, candidates, step_in_flight ? in_flight_ : no_step, ++step_);
  slots_ = plan.slots;
  SendLoads(plan);
  admissible_.clear();
  for (size_t w = 0; w < waiting.size(); ++w) {
    const int slot = plan.slot_of[first_waiting + w];
    if (slot == 0 || (slot > 0 && ready_[slot - 1])) admissible_.insert(waiting[w]);
  }
  for (size_t i = 0; i < first_waiting && i < candidates.size(); ++i) {
    const int slot = plan.slot_of[i];
    LOG_IF(DFATAL, slot < 0 || (slot > 0 && !ready_[slot - 1]))
        << "a running request's LoRA adapter " << candidates[i].adapter_id << " has no ready slot";
  }
  scheduler.set_admission_gate(
      [this](const SequenceGroup& group) { return admissible_.contains(&group); });
}

void LoraStepper::AfterSchedule(Scheduler& scheduler) {
  scheduler.set_admission_gate(nullptr);
  admissible_.clear();
}

void LoraStepper::AttachSlots(const SchedulerOutput& output, pagoda::worker::v1::StepPlan& plan) {
  CHECK_EQ(plan.sequences_size(), static_cast<int>(output.scheduled.size()));
  in_flight_.clear();
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const int adapter = output.scheduled[i].seq->lora_id();
    if (adapter == 0) continue;
    in_flight_.insert(adapter);
    int slot = -1;
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].adapter_id == adapter && ready_[s]) slot = static_cast<int>(s) + 1;
    }
    LOG_IF(DFATAL, slot < 0) << "LoRA adapter " << adapter << " scheduled without a ready slot";
    plan.mutable_sequences(static_cast<int>(i))->set_lora_slot(slot);
  }
}

void LoraStepper::Forget(int lora_id, bool step_in_flight) {
  names_.erase(lora_id);
  pending_forgets_.push_back(lora_id);
  ApplyForgets(step_in_flight);
}

void LoraStepper::ApplyForgets(bool step_in_flight) {
  std::vector<int> still_used;
  for (int lora_id : pending_forgets_) {
    if (step_in_flight && in_flight_.contains(lora_id)) {
      still_used.push_back(lora_id);
      continue;
    }
    const int slot = lora::ReleaseLoraSlot(slots_, lora_id);
    if (slot == 0) continue;
    EmptySlot(slot - 1);
    loader_.Unload(slot);
  }
  pending_forgets_ = std::move(still_used);
}

void LoraStepper::ResetForRestart() {
  loader_.Quiesce();
  for (size_t s = 0; s < slots_.size(); ++s) {
    slots_[s] = lora::LoraSlotState{};
    EmptySlot(static_cast<int>(s));
  }
  in_flight_.clear();
  pending_forgets_.clear();  // Their slots are empty on the new workers.
}

void LoraStepper::EmptySlot(int index) {
  ready_[index] = false;
  generation_[index] = next_generation_++;  // Any answer still due is stale.
}

std::vector<LoraStepper::FailedLoad> LoraStepper::TakeFailedLoads() {
  std::vector<FailedLoad> failed;
  for (LoraSlotLoader::Done& done : loader_.TakeDone()) {
    const int index = done.slot - 1;
    if (generation_[index] != done.generation) continue;  // Replanned meanwhile.
    if (done.status.ok()) {
      ready_[index] = true;
      continue;
    }
    const int adapter = slots_[index].adapter_id;
    slots_[index] = lora::LoraSlotState{};
    EmptySlot(index);
    // Dead workers: the engine restarts them and the adapter loads again.
    if (absl::IsUnavailable(done.status)) continue;
    LOG(ERROR) << "LoRA adapter " << NameOf(adapter) << " could not be loaded: " << done.status;
    failed.push_back({adapter, absl::Status(done.status.code(),
                                            absl::StrCat("the LoRA adapter \"", NameOf(adapter),
                                                         "\" could not be loaded on the workers: ",
                                                         done.status.message()))});
  }
  return failed;
}

void LoraStepper::SendLoads(const lora::LoraSlotPlan& plan) {
  for (const auto& [slot, adapter] : plan.loads) {
    const int index = slot - 1;
    EmptySlot(index);
    absl::StatusOr<lora::LoraEntry> entry = registry_->FindById(adapter);
    if (!entry.ok()) {
      // Its requests hold it in the registry, which refuses to remove it.
      LOG(DFATAL) << "LoRA adapter " << adapter << " planned but not registered";
      slots_[index] = lora::LoraSlotState{};
      continue;
    }
    names_[adapter] = entry->spec.name;
    loader_.Load(slot, generation_[index], entry->spec.path);
  }
}

const std::string& LoraStepper::NameOf(int lora_id) {
  auto it = names_.find(lora_id);
  if (it != names_.end()) return it->second;
  absl::StatusOr<lora::LoraEntry> entry = registry_->FindById(lora_id);
  return names_[lora_id] = entry.ok() ? entry->spec.name : absl::StrCat(lora_id);
}

LoraActivity LoraStepper::Activity(const Scheduler& scheduler) {
  LoraActivity activity;
  activity.max_loras = static_cast<int>(slots_.size());
  absl::flat_hash_set<int> running_seen, waiting_seen;
  scheduler.ForEachGroup([&](const SequenceGroup& group, SequenceStatus queue) {
    const int adapter = group.lora_id();
    if (adapter == 0 || queue == SequenceStatus::kSwapped) return;
    const bool running = queue == SequenceStatus::kRunning;
    if (!(running ? running_seen : waiting_seen).insert(adapter).second) return;
    (running ? activity.running : activity.waiting).push_back(NameOf(adapter));
  });
  return activity;
}

}  // namespace pagoda::scheduler

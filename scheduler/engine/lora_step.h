// LoraStepper: the engine's LoRA bookkeeping around each step
// (docs/lora.md). Before Schedule() it plans the worker slots for the
// scheduler's groups with PlanLoraSlots (running and swapped first, then
// waiting, in queue order), sends the loads ahead on LoraSlotLoader's
// thread, and gates admission: a waiting group whose adapter has no slot
// loaded on every rank is passed over this step (keeping its place). After
// Schedule() it lifts the gate; it then stamps each row's
// SequenceStep.lora_slot. A step thus never holds more distinct adapters
// than --max-loras, a slot is never reloaded under a step in flight that
// uses it, and after a worker restart every slot counts as empty.
// Engine thread only.
#ifndef PAGODA_SCHEDULER_ENGINE_LORA_STEP_H_
#define PAGODA_SCHEDULER_ENGINE_LORA_STEP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "scheduler/engine/engine_stats.h"
#include "scheduler/engine/lora_slot_loader.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/lora/lora_registry.h"
#include "scheduler/lora/lora_slot_policy.h"

namespace pagoda::scheduler {

class LoraStepper {
 public:
  // An adapter the workers could not load: its requests fail with `status`.
  struct FailedLoad {
    int lora_id = 0;
    absl::Status status;
  };

  // `registry` and `workers` must outlive the stepper. REQUIRES: max_loras > 0.
  LoraStepper(int max_loras, const lora::LoraRegistry* registry, WorkerGroup* workers);

  // The adapters whose load failed since the last call (not for dead
  // workers: those adapters load again after the restart). Their requests
  // must end before BeforeSchedule, or it would plan the load again.
  std::vector<FailedLoad> TakeFailedLoads();
  // Before Schedule(). `step_in_flight`: the last step stamped by
  // AttachSlots may still run on the workers (overlapped scheduling).
  void BeforeSchedule(Scheduler& scheduler, bool step_in_flight);
  // After Schedule(): admission is no longer gated.
  void AfterSchedule(Scheduler& scheduler);
  // Sets each row's lora_slot (plan.sequences(i) is output.scheduled[i]) and
  // remembers the step's adapters as in flight. A row whose adapter has no
  // ready slot (a bug) gets slot -1, which the workers refuse.
  void AttachSlots(const SchedulerOutput& output, pagoda::worker::v1::StepPlan& plan);
  // An adapter removed from the registry: its slot is freed and unloaded
  // now, or at the first BeforeSchedule where no step in flight uses it.
  void Forget(int lora_id, bool step_in_flight);
  // Unloads the forgotten adapters no step in flight uses (BeforeSchedule
  // does it too; the engine calls it when idle).
  void ApplyForgets(bool step_in_flight);
  // Before WorkerGroup::Recover: waits for the load in progress, drops the
  // rest and empties every slot (the restarted workers' are empty).
  void ResetForRestart();
  // vllm:lora_requests_info's labels, from the scheduler's queues.
  LoraActivity Activity(const Scheduler& scheduler);

  const std::vector<lora::LoraSlotState>& slots() const { return slots_; }
  // Whether slot `slot` (1..max_loras) is loaded on every rank.
  bool ready(int slot) const { return ready_[slot - 1]; }
  LoraSlotLoader& loader() { return loader_; }

 private:
  // Sends the plan's loads.
  void SendLoads(const lora::LoraSlotPlan& plan);
  void EmptySlot(int index);
  const std::string& NameOf(int lora_id);

  const lora::LoraRegistry* const registry_;
  std::vector<lora::LoraSlotState> slots_;  // As planned (loads may be pending).
  std::vector<bool> ready_;                 // Loaded on every rank.
  std::vector<int64_t> generation_;         // Of the slot's latest load.
  int64_t next_generation_ = 1;
  int64_t step_ = 0;
  absl::flat_hash_set<int> in_flight_;  // Adapters of the last stamped step.
  std::vector<int> pending_forgets_;
  // Waiting groups the gate lets through this step.
  absl::flat_hash_set<const SequenceGroup*> admissible_;
  absl::flat_hash_map<int, std::string> names_;  // For the metric.
  LoraSlotLoader loader_;                        // Last: its thread stops before the rest goes.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_LORA_STEP_H_

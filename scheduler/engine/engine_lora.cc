// The Engine's part of LoRA serving (docs/lora.md): the registry's in-use
// count released once per accepted request, the worker slots planned
// before each Schedule() (lora_step.h), the requests of an adapter the
// workers could not load failed, and unloaded adapters' slots freed between
// steps. Kept apart from engine.cc.

#include <memory>
#include <string>
#include <vector>

#include "scheduler/engine/engine.h"
#include "scheduler/engine/finish_reason.h"

namespace pagoda::scheduler {

void Engine::ReleaseLora(int lora_id) {
  if (lora_id != 0 && config_.lora_registry != nullptr) config_.lora_registry->Release(lora_id);
}

void Engine::ForgetLoraAdapters(const std::vector<int>& lora_ids) {
  if (lora_ == nullptr) return;
  for (int lora_id : lora_ids) lora_->Forget(lora_id, HasStepsInFlight());
}

void Engine::PrepareLoraSlots() {
  FailLoraRequests(lora_->TakeFailedLoads());
  lora_->BeforeSchedule(*scheduler_, HasStepsInFlight());
}

void Engine::FailLoraRequests(const std::vector<LoraStepper::FailedLoad>& failed) {
  for (const LoraStepper::FailedLoad& load : failed) {
    std::vector<std::string> ids;
    for (const auto& [id, state] : requests_) {
      if (state->lora_id == load.lora_id) ids.push_back(id);
    }
    for (const std::string& id : ids) {
      std::unique_ptr<SequenceGroup> group = scheduler_->AbortRequest(id);
      FinishRequest(id, load.status, kFinishReasonError);
      if (group != nullptr) RetireGroup(std::move(group));
    }
  }
}

}  // namespace pagoda::scheduler

// The Engine's part of LoRA serving (docs/lora.md): the registry's in-use
// count released once per accepted request, and unloaded adapters' worker
// slots freed between steps. Kept apart from engine.cc.

#include <vector>

#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {

void Engine::ReleaseLora(int lora_id) {
  if (lora_id != 0 && config_.lora_registry != nullptr) config_.lora_registry->Release(lora_id);
}

void Engine::ForgetLoraAdapters(const std::vector<int>& lora_ids) {
  // No adapter is placed in a worker slot yet, so there is none to free.
  (void)lora_ids;
}

}  // namespace pagoda::scheduler

// Start-up's LoRA stage: the adapters named by --lora-modules read and
// checked against the base model before any worker starts, and registered
// as the adapters the server serves from its first request.
#ifndef PAGODA_SCHEDULER_STARTUP_LORA_MODULES_H_
#define PAGODA_SCHEDULER_STARTUP_LORA_MODULES_H_

#include "absl/status/status.h"
#include "common/model_config.h"
#include "scheduler/lora/lora_options.h"
#include "scheduler/lora/lora_registry.h"

namespace pagoda::scheduler {

// Reads every --lora-modules adapter in full (config, tensors, shapes
// against `base`, rank at most --max-lora-rank) and adds it to `registry`
// with its path made absolute and canonical (what the workers load). The
// first bad one is the error, one line naming the adapter and what is
// wrong; nothing is registered then. No-op without --enable-lora.
absl::Status RegisterLoraModules(const lora::LoraOptions& options, const ModelConfig& base,
                                 lora::LoraRegistry& registry);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_LORA_MODULES_H_

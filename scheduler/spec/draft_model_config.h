#ifndef PAGODA_SCHEDULER_SPEC_DRAFT_MODEL_CONFIG_H_
#define PAGODA_SCHEDULER_SPEC_DRAFT_MODEL_CONFIG_H_

// Where speculative decoding's draft_model method can run: the checks of
// --speculative-config's draft model against the workers' flags (its files
// are checked against the target's at start, scheduler/startup/
// draft_model_files.h).

#include <string>

#include "absl/status/status.h"
#include "scheduler/spec/speculative_config.h"

namespace pagoda::scheduler {

// OK when `config`'s draft model can run beside the target on these
// workers: the CPU worker, where a draft model or EAGLE head runs at
// tensor-parallel size 1 (on rank 0, which sends its drafts to the other
// ranks) or at the target's (sharded as the target is; CheckAgainstTarget
// refuses other sizes). INVALID_ARGUMENT, one line naming the flag and
// value, otherwise.
// REQUIRES: CheckAgainstTarget(config, tensor_parallel_size) is OK.
absl::Status CheckDraftModelPlacement(const SpeculativeConfig& config, const std::string& device,
                                      int tensor_parallel_size);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_SPEC_DRAFT_MODEL_CONFIG_H_

#ifndef PAGODA_SCHEDULER_SPEC_DRAFT_MODEL_CONFIG_H_
#define PAGODA_SCHEDULER_SPEC_DRAFT_MODEL_CONFIG_H_

// Where speculative decoding's draft_model method can run: the checks of
// --speculative-config's draft model against the workers' flags (its files
// are checked against the target's at start, scheduler/startup/
// draft_model_files.h).

#include <string>

#include "absl/status/status.h"

namespace pagoda::scheduler {

// OK when a draft model can run beside the target on these workers: the CPU
// worker at one rank (the draft then runs on rank 0 at tensor-parallel size
// 1). INVALID_ARGUMENT, one line naming the flag, otherwise.
absl::Status CheckDraftModelPlacement(const std::string& device, int tensor_parallel_size);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_SPEC_DRAFT_MODEL_CONFIG_H_

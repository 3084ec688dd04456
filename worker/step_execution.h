#ifndef PAGODA_WORKER_STEP_EXECUTION_H_
#define PAGODA_WORKER_STEP_EXECUTION_H_

#include <functional>

#include "absl/status/statusor.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/batch.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace pagoda::worker {

// What a runner lends ExecuteStepPlan; every pointer outlives the call.
struct StepExecution {
  CacheEngine* cache = nullptr;
  Backend* backend = nullptr;
  TimedCommunicator* timed = nullptr;
  SampleResults* samples = nullptr;  // Reused from step to step.
  int vocab_size = 0;
};

// The runner's forward pass over a flattened step (eager, or a replayed
// graph on CUDA).
using ForwardPass = std::function<absl::StatusOr<ForwardOutput>(const FlatBatch&)>;

// ModelRunner::ExecuteStep around `forward`, the same on every device:
// validates and flattens `plan` (a rejected plan touches nothing), applies its
// block moves, runs `forward` over its tokens, samples on rank 0 (the others'
// part ends with the layers), and fills in the step's times. A backend error
// (Backend::status) fails the step.
absl::StatusOr<v1::StepResult> ExecuteStepPlan(const v1::StepPlan& plan, const StepExecution& step,
                                               const ForwardPass& forward);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_STEP_EXECUTION_H_

#ifndef PAGODA_WORKER_STEP_EXECUTION_H_
#define PAGODA_WORKER_STEP_EXECUTION_H_

// ExecuteStepPlan: one step plan run on a runner's model, cache and backend:
// the forward pass, sampling and the reply, shared by every device.

#include <functional>

#include "absl/status/statusor.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/flat_batch.h"
#include "worker/last_sampled_tokens.h"
#include "worker/llama_model.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

// What a runner lends ExecuteStepPlan; every pointer outlives the call.
struct StepExecution {
  CacheEngine* cache = nullptr;
  Backend* backend = nullptr;
  TimedCommunicator* timed = nullptr;
  SampleResults* samples = nullptr;  // Reused from step to step.
  LlamaModel* model = nullptr;       // Scores prompt logprob rows (rank 0).
  int vocab_size = 0;
  int max_positions = 0;  // LlamaModel::max_positions().
  // Brings the masks a plan promised (null or empty: none can follow).
  const StepMaskWait* wait_for_masks = nullptr;
  // Overlap: the previous step's tokens, which the plan's placeholders
  // refer to; replaced by this step's after it succeeds, cleared when it
  // fails or is refused (null: placeholders are refused). `share_staging`
  // is the backend buffer ShareLastSampledTokens reuses (TP only).
  LastSampledTokens* last_sampled = nullptr;
  std::unique_ptr<Buffer>* share_staging = nullptr;
};

// The runner's forward pass over a flattened step (eager, or a replayed
// graph on CUDA).
using ForwardPass = std::function<absl::StatusOr<ForwardOutput>(const FlatBatch&)>;

// ModelRunner::ExecuteStep around `forward`, the same on every device:
// validates and flattens `plan` (a rejected plan touches nothing), gives
// every rank the placeholder tokens (ShareLastSampledTokens), applies its
// block moves, runs `forward` over its tokens, then, if the plan promised
// token masks, waits for them (every rank: all check them alike) and fills
// them in (ApplyStepMasks), samples on rank 0 (the others'
// part ends with the layers), then scores the prompt logprob rows the plan
// asks for (worker/prompt_logprobs.h; `forward` must then leave
// ForwardOutput::final_hidden), fills in the step's times and records its
// sampled tokens for the next step's placeholders.
//
// Errors: a refused plan is INVALID_ARGUMENT and changes nothing; refused
// masks are INVALID_ARGUMENT too, after the forward pass (its KV writes
// belong to the step's own sequences, which the refusal fails). Anything
// that fails after validation (the forward pass, a collective, a backend's
// sticky error from Backend::status, whatever code it carries) is a fault of
// this worker, not of the request: it comes back as AsWorkerFault makes it,
// so the server restarts the group instead of failing the step's requests.
absl::StatusOr<v1::StepResult> ExecuteStepPlan(const v1::StepPlan& plan, const StepExecution& step,
                                               const ForwardPass& forward);

// `status` as a worker fault: codes that mean "bad request" (INVALID_ARGUMENT,
// RESOURCE_EXHAUSTED, FAILED_PRECONDITION, OUT_OF_RANGE, ...) become INTERNAL
// with the original code in the message; fault codes (UNAVAILABLE, INTERNAL,
// ABORTED, DEADLINE_EXCEEDED, CANCELLED, DATA_LOSS, UNKNOWN) stay. OK stays OK.
absl::Status AsWorkerFault(const absl::Status& status);

// Whether `code` is one AsWorkerFault leaves as it is.
bool IsWorkerFaultCode(absl::StatusCode code);

// Whether `code` says the device itself failed (INTERNAL, DATA_LOSS, UNKNOWN),
// rather than a collective or a cancellation: such a worker is unhealthy.
bool IsDeviceFaultCode(absl::StatusCode code);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_STEP_EXECUTION_H_

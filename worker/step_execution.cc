#include "worker/step_execution.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "worker/prompt_logprobs.h"

namespace pagoda::worker {

bool IsWorkerFaultCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

bool IsDeviceFaultCode(absl::StatusCode code) {
  return code == absl::StatusCode::kInternal || code == absl::StatusCode::kDataLoss ||
         code == absl::StatusCode::kUnknown;
}

absl::Status AsWorkerFault(const absl::Status& status) {
  if (status.ok() || IsWorkerFaultCode(status.code())) return status;
  return absl::InternalError(absl::StrCat("worker fault after a valid plan (",
                                          absl::StatusCodeToString(status.code()),
                                          "): ", status.message()));
}

namespace {

// The part of a step after validation: every error is a fault.
absl::Status RunValidatedStep(const v1::StepPlan& plan, const FlatBatch& batch,
                              const StepExecution& step, const ForwardPass& forward,
                              v1::StepResult* result) {
  step.cache->ApplyBlockMoves(batch);
  if (batch.num_tokens() > 0) {
    absl::StatusOr<ForwardOutput> output = forward(batch);
    if (!output.ok()) return output.status();
    if (step.timed->rank() == 0 && batch.num_logits_rows() > 0) {
      step.backend->Sample(output->logits, output->sampling, step.samples);
      if (absl::Status status = step.backend->status(); !status.ok()) return status;
      AppendSampledTokens(plan, batch, *step.samples, result);
    }
    if (step.timed->rank() == 0 && batch.wants_prompt_logprobs()) {
      if (output->final_hidden == nullptr) {
        return absl::InternalError("the forward pass kept no hidden states for prompt logprobs");
      }
      AppendPromptLogprobs(plan, batch, *output, step.model, step.backend, result);
    }
  }
  return step.backend->status();
}

}  // namespace

absl::StatusOr<v1::StepResult> ExecuteStepPlan(const v1::StepPlan& plan, const StepExecution& step,
                                               const ForwardPass& forward) {
  const auto start = std::chrono::steady_clock::now();
  // A backend that failed before this step (its error is sticky) runs nothing.
  if (absl::Status status = step.backend->status(); !status.ok()) return AsWorkerFault(status);
  auto batch = FlattenStepPlan(plan, step.cache->Limits(step.vocab_size, step.max_positions));
  if (!batch.ok()) return batch.status();

  v1::StepResult result;
  result.set_step_id(plan.step_id());
  if (absl::Status status = RunValidatedStep(plan, *batch, step, forward, &result); !status.ok()) {
    return AsWorkerFault(status);
  }
  result.set_forward_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  result.set_all_reduce_seconds(step.timed->TakeSeconds());
  return result;
}

}  // namespace pagoda::worker

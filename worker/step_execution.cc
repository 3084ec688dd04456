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

// Waits for the masks `plan` promised and fills them into `batch` and the
// sampler's arrays. A wait that fails is a fault (its own code); masks
// that do not fit the plan, or a wait that says so (INVALID_ARGUMENT), are
// a refusal, returned in `refusal`.
absl::Status AwaitStepMasks(const v1::StepPlan& plan, const StepExecution& step,
                            const ForwardOutput& output, FlatBatch& batch, v1::StepResult* result,
                            absl::Status* refusal) {
  if (step.wait_for_masks == nullptr || !*step.wait_for_masks) {
    *refusal = absl::InvalidArgumentError(
        absl::StrCat("step ", plan.step_id(), " promises token masks, but none can follow"));
    return absl::OkStatus();
  }
  const auto wait_start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::StepMasks> masks = (*step.wait_for_masks)();
  result->set_mask_wait_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count());
  if (absl::IsInvalidArgument(masks.status())) {
    *refusal = masks.status();
    return absl::OkStatus();
  }
  if (!masks.ok()) return masks.status();
  *refusal = ApplyStepMasks(plan, *masks, step.vocab_size, &batch);
  if (refusal->ok() && step.timed->rank() == 0) step.model->UploadTokenMasks(batch, output);
  return absl::OkStatus();
}

// The part of a step after validation: every error is a fault, but for
// refused masks (`refusal`).
absl::Status RunValidatedStep(const v1::StepPlan& plan, FlatBatch& batch, const StepExecution& step,
                              const ForwardPass& forward, v1::StepResult* result,
                              absl::Status* refusal) {
  step.cache->ApplyBlockMoves(batch);
  if (batch.num_tokens() > 0) {
    absl::StatusOr<ForwardOutput> output = forward(batch);
    if (!output.ok()) return output.status();
    if (batch.awaits_masks()) {
      absl::Status waited = AwaitStepMasks(plan, step, *output, batch, result, refusal);
      if (!waited.ok() || !refusal->ok()) return waited;
    }
    if (step.timed->rank() == 0 && batch.num_logits_rows() > 0) {
      step.backend->Sample(output->logits, output->sampling, step.samples);
      if (absl::Status status = step.backend->status(); !status.ok()) return status;
      AppendSampledTokens(plan, batch, *step.samples, result);
    }
    // Every rank computes its vocabulary rows of a split lm_head.
    const bool scores = step.timed->rank() == 0;
    if ((scores || step.model->splits_vocab()) && batch.wants_prompt_logprobs()) {
      if (output->final_hidden == nullptr) {
        return absl::InternalError("the forward pass kept no hidden states for prompt logprobs");
      }
      if (absl::Status s = AppendPromptLogprobs(plan, batch, *output, step.model, step.backend,
                                                scores ? result : nullptr);
          !s.ok()) {
        return s;
      }
    }
  }
  return step.backend->status();
}

}  // namespace

namespace {

// ExecuteStepPlan without the bookkeeping of the last sampled tokens.
absl::StatusOr<v1::StepResult> ExecuteCheckedStep(const v1::StepPlan& plan,
                                                  const StepExecution& step,
                                                  const ForwardPass& forward) {
  const auto start = std::chrono::steady_clock::now();
  // A backend that failed before this step (its error is sticky) runs nothing.
  if (absl::Status status = step.backend->status(); !status.ok()) return AsWorkerFault(status);
  BatchLimits limits = step.cache->Limits(step.vocab_size, step.max_positions);
  limits.last_sampled = step.last_sampled;
  limits.lora_slots = step.model->PinLoraSlots();  // What this step's forward applies.
  auto batch = FlattenStepPlan(plan, limits);
  if (!batch.ok()) return batch.status();
  if (!batch->placeholder_rows.empty()) {
    absl::Status shared = ShareLastSampledTokens(batch->placeholder_rows, step.timed, step.backend,
                                                 step.share_staging, &batch->input_ids);
    if (!shared.ok()) return AsWorkerFault(shared);
  }

  v1::StepResult result;
  result.set_step_id(plan.step_id());
  absl::Status refusal;
  if (absl::Status status = RunValidatedStep(plan, *batch, step, forward, &result, &refusal);
      !status.ok()) {
    return AsWorkerFault(status);
  }
  if (!refusal.ok()) return refusal;
  result.set_forward_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  result.set_all_reduce_seconds(step.timed->TakeSeconds());
  return result;
}

}  // namespace

absl::StatusOr<v1::StepResult> ExecuteStepPlan(const v1::StepPlan& plan, const StepExecution& step,
                                               const ForwardPass& forward) {
  absl::StatusOr<v1::StepResult> result = ExecuteCheckedStep(plan, step, forward);
  if (step.last_sampled != nullptr) {
    // Placeholders refer to the immediately previous step only: a step that
    // did not complete leaves nothing for the next one to refer to.
    if (result.ok()) {
      step.last_sampled->Record(plan, step.timed->rank() == 0 ? &*result : nullptr);
    } else {
      step.last_sampled->Clear();
    }
  }
  return result;
}

}  // namespace pagoda::worker

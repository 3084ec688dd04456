#include "worker/step_execution.h"

#include <chrono>

namespace pagoda::worker {

absl::StatusOr<v1::StepResult> ExecuteStepPlan(const v1::StepPlan& plan, const StepExecution& step,
                                               const ForwardPass& forward) {
  const auto start = std::chrono::steady_clock::now();
  auto batch = FlattenStepPlan(plan, step.cache->Limits(step.vocab_size));
  if (!batch.ok()) return batch.status();
  step.cache->ApplyBlockMoves(*batch);

  v1::StepResult result;
  result.set_step_id(plan.step_id());
  if (batch->num_tokens() > 0) {
    absl::StatusOr<ForwardOutput> output = forward(*batch);
    if (!output.ok()) return output.status();
    if (step.timed->rank() == 0 && batch->num_logits_rows() > 0) {
      step.backend->Sample(output->logits, output->sampling, step.samples);
      if (absl::Status status = step.backend->status(); !status.ok()) return status;
      AppendSampledTokens(plan, *batch, *step.samples, &result);
    }
  }
  if (absl::Status status = step.backend->status(); !status.ok()) return status;
  result.set_forward_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  result.set_all_reduce_seconds(step.timed->TakeSeconds());
  return result;
}

}  // namespace pagoda::worker

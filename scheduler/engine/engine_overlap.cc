// The Engine's part of overlapped scheduling (step_pipeline.h has the
// cycle and the state changes): one step in flight while the next is
// planned and sent, the previous step's tokens processed while the workers
// run the new one. Kept apart from engine.cc, whose schedule, output and
// publishing calls it reuses.
//
// Why the tokens are those of one step at a time: every row runs with the
// inputs, positions, block table and sample_index it would have had one
// step later (the placeholder becomes the token the worker sampled), the
// worker counts the placeholder in its penalties, and no row whose plan
// needs a token the server lacks is sent (groups that need it sit out a
// step; steps that may preempt wait until nothing is in flight). A
// grammar's mask and a multi-token bad word's ban, which need the token in
// flight, are not in the plan: they follow it, built once that token is in
// (FulfilPromisedMasks). Tokens of
// sequences that finished meanwhile are dropped unread.

#include <memory>
#include <utility>

#include "glog/logging.h"
#include "scheduler/engine/engine.h"
#include "scheduler/engine/step_plan.h"

namespace pagoda::scheduler {

bool Engine::StepOverlapped() {
  StepClock clock;
  clock.start = absl::Now();
  // Preemption needs every token in: the step it may preempt in waits.
  if (HasStepsInFlight() && scheduler_->MayPreempt() && !FinishOldestStep()) return true;
  SchedulerOutput output = ScheduleBatch(&clock);
  if (output.empty()) {
    if (HasStepsInFlight()) {
      FinishOldestStep();
      return true;
    }
    PublishSnapshot(nullptr);
    return !output.ignored.empty();
  }
  auto step = std::make_unique<InFlightStep>(std::move(output));
  step->clock = clock;
  step->plan = google::protobuf::Arena::CreateMessage<pagoda::worker::v1::StepPlan>(&step->arena);
  BuildStepPlanInto(next_step_id_++, step->output, scheduler_->block_manager(),
                    config_.eos_token_ids, step->plan, &table_deltas_,
                    &sampling_deltas_);
  MarkPlaceholders(step->output, step->plan);
  if (lora_ != nullptr) lora_->AttachSlots(step->output, *step->plan);
  StepMaskSource masks;
  if (PromisesTokenMasks(*step->plan)) {
    // A constrained row's mask needs the grammar advanced by the token the
    // step before samples (a multi-token bad word's ban, that token): the
    // sender thread writes the plan now and waits for the masks, which the
    // engine builds once that step is processed (the workers' sampler waits
    // for them after the forward pass).
    step->pending_masks = std::make_shared<DeferredStepMasks>(step->plan->step_id());
    masks = [pending = step->pending_masks] { return pending->Wait(); };
  }
  step->clock.rpc_start = absl::Now();
  InFlightStep* sent = pipeline_->Send(std::move(step), std::move(masks));
  if (pipeline_->size() > 1 && !FinishOldestStep()) return true;
  FulfilPromisedMasks(sent);
  AdvancePastStep(sent->output, config_.scheduler.max_model_len, config_.vocab_size);
  return true;
}

void Engine::FulfilPromisedMasks(InFlightStep* step) {
  if (step->pending_masks == nullptr) return;
  // On the engine thread that owns the sequences: every token but this
  // step's own is in, and no placeholder is (AdvancePastStep comes next).
  step->pending_masks->Fulfil(
      BuildStepMasks(*step->plan, step->output, config_.eos_token_ids, config_.vocab_size));
  step->pending_masks = nullptr;
}

bool Engine::FinishOldestStep() {
  auto [step, result] = pipeline_->WaitOldest();
  step->clock.rpc_end = absl::Now();
  absl::StatusOr<std::vector<GeneratedToken>> sampled;
  absl::StatusOr<std::vector<StepPromptLogprobs>> prompt_logprobs;
  absl::Status failed = result.status();
  if (failed.ok()) {
    sampled = ExtractSampledTokens(*result, step->output);
    prompt_logprobs = ExtractPromptLogprobs(*result, *step->plan, step->output);
    failed = !sampled.ok() ? sampled.status() : prompt_logprobs.status();
  }
  if (!failed.ok()) {
    AbandonStep(step->output);
    AbandonStepsInFlight();
    HandleStepFailure(step->plan->step_id(), failed, step->output);
    PublishSnapshot(nullptr);
    return false;
  }
  for (StepPromptLogprobs& scored : *prompt_logprobs) {
    if (scored.group->IsFinished()) continue;  // Cancelled meanwhile.
    scored.group->prompt_logprobs().Add(scored.first_position, std::move(scored.entries));
  }
  LiveStep live = TakeLiveEntries(step->output, *std::move(sampled));
  // The step queued behind this one samples once its masks are in: they are
  // built as soon as this step's tokens are appended, before the prefix-cache
  // publication, streaming and metrics (docs/architecture.md, "Overlapped
  // scheduling", 7.).
  const int generated =
      ProcessOutputs(live.output, live.sampled, /*accepted_drafts=*/nullptr, [this] {
        if (!pipeline_->empty()) FulfilPromisedMasks(pipeline_->oldest());
      });
  step->clock.end = absl::Now();
  PublishStep(step->plan->step_id(), step->output, *result, generated, step->clock);
  return true;
}

void Engine::AbandonStepsInFlight() {
  table_deltas_.Reset();  // What the workers hold is unknown now.
  sampling_deltas_.Reset();
  if (!HasStepsInFlight()) return;
  // A step whose masks wait for a failed one would never go out whole.
  pipeline_->AbandonPendingMasks();
  while (HasStepsInFlight()) {
    auto [step, result] = pipeline_->WaitOldest();
    AbandonStep(step->output);
  }
}

void Engine::RetireGroup(std::unique_ptr<SequenceGroup> group) {
  if (pipeline_ != nullptr) pipeline_->Retire(std::move(group));
}

}  // namespace pagoda::scheduler

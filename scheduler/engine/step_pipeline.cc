#include "scheduler/engine/step_pipeline.h"

#include <time.h>

#include <algorithm>
#include <utility>

#include "glog/logging.h"
#include "scheduler/engine/step_plan.h"

namespace pagoda::scheduler {
namespace {

// Whether the ban of the group's multi-token bad words, which reads the
// token in flight, can follow the plan in a mask (BuildStepMasks): a
// grammar's mask takes it in; otherwise a mask of the vocabulary but the
// ban, which must leave a token (a worker refuses an empty mask).
bool BadWordBanCanFollow(const SequenceGroup& group, int vocab_size) {
  const int words = group.sampling().num_multi_token_bad_words();
  return words == 0 || group.sampling().grammar != nullptr || words < vocab_size;
}

// Whether the group's next step needs the token `entry` samples on the
// server first (docs/architecture.md, "Overlapped scheduling", 4., 6.-8.).
// A grammar's mask and a multi-token bad word's ban do not: they follow the
// plan, built once the token is in (Engine::StepOverlapped,
// DeferredStepMasks).
bool NeedsTokenFirst(const ScheduledSequence& entry, int max_model_len, int vocab_size) {
  const SequenceGroup& group = *entry.group;
  const Sequence& seq = *entry.seq;
  const SamplingOptions& sampling = group.sampling();
  // Beams are chosen from every candidate's logprobs.
  if (sampling.use_beam_search || !BadWordBanCanFollow(group, vocab_size)) return true;
  // The other samples fork from the first token.
  if (static_cast<int>(group.seqs().size()) < sampling.best_of) return true;
  // A step with drafts returns a run of tokens of unknown length.
  if (entry.num_lookahead_slots > 0 || seq.num_lookahead_slots() > 0) return true;
  // Its last token (max_tokens, max_model_len): no step past it.
  return seq.num_output_tokens() + 1 >= group.stopping().max_tokens ||
         seq.length() + 1 >= max_model_len;
}

}  // namespace

double ThreadCpuSeconds() {
  timespec now{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) return 0;
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

void DeferredStepMasks::Fulfil(pagoda::worker::v1::StepMasks masks) {
  absl::MutexLock lock(&mu_);
  if (!masks_.has_value()) masks_ = std::move(masks);
}

void DeferredStepMasks::Abandon() {
  pagoda::worker::v1::StepMasks none;
  none.set_step_id(step_id_);
  Fulfil(std::move(none));
}

pagoda::worker::v1::StepMasks DeferredStepMasks::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<pagoda::worker::v1::StepMasks>* masks) { return masks->has_value(); },
      &masks_));
  return *masks_;
}

InFlightStep::InFlightStep(SchedulerOutput scheduled)
    : arena(StepArenaOptions()), output(std::move(scheduled)) {}

void MarkPlaceholders(const SchedulerOutput& output, pagoda::worker::v1::StepPlan* plan) {
  CHECK_EQ(plan->sequences_size(), static_cast<int>(output.scheduled.size()));
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledSequence& entry = output.scheduled[i];
    if (!entry.seq->has_pending_token()) continue;
    // The scheduler plans a sequence with a token in flight only as a
    // decode of that token (no preemption while a step is in flight).
    CHECK_EQ(entry.start_position + entry.num_tokens, entry.seq->length());
    CHECK_EQ(entry.num_tokens, 1);
    plan->mutable_sequences(static_cast<int>(i))->set_input_from_last_sample(true);
  }
}

void AdvancePastStep(const SchedulerOutput& output, int max_model_len, int vocab_size) {
  for (const ScheduledSequence& entry : output.scheduled) {
    if (entry.do_sample && !IsFinished(entry.seq->status()) &&
        NeedsTokenFirst(entry, max_model_len, vocab_size)) {
      entry.group->set_waits_for_tokens(true);
    }
  }
  for (const ScheduledSequence& entry : output.scheduled) {
    if (IsFinished(entry.seq->status()) || entry.group->waits_for_tokens()) continue;
    entry.seq->set_num_computed_tokens(entry.start_position + entry.num_tokens);
    if (entry.do_sample) entry.seq->AppendPlaceholder();
  }
}

LiveStep TakeLiveEntries(const SchedulerOutput& output, std::vector<GeneratedToken> sampled) {
  LiveStep live;
  live.output.scheduled.reserve(output.scheduled.size());
  live.sampled.reserve(sampled.size());
  size_t next_sample = 0;
  for (const ScheduledSequence& entry : output.scheduled) {
    GeneratedToken* token = nullptr;
    if (entry.do_sample) {
      CHECK_LT(next_sample, sampled.size());
      token = &sampled[next_sample++];
    }
    entry.group->set_waits_for_tokens(false);
    if (IsFinished(entry.seq->status())) continue;  // A late stop or cancel.
    if (entry.seq->has_pending_token()) entry.seq->RemovePlaceholder();
    live.output.scheduled.push_back(entry);
    if (token != nullptr) live.sampled.push_back(std::move(*token));
  }
  return live;
}

void AbandonStep(const SchedulerOutput& output) {
  for (const ScheduledSequence& entry : output.scheduled) {
    entry.group->set_waits_for_tokens(false);
    Sequence& seq = *entry.seq;
    if (entry.do_sample && seq.has_pending_token() &&
        seq.length() == entry.start_position + entry.num_tokens + 1) {
      seq.RemovePlaceholder();
    }
    seq.set_num_computed_tokens(std::min(seq.num_computed_tokens(), entry.start_position));
  }
}

StepPipeline::StepPipeline(WorkerGroup* workers) : queue_(workers) {}

InFlightStep* StepPipeline::Send(std::unique_ptr<InFlightStep> step, StepMaskSource masks) {
  if (!steps_.empty()) ++num_overlapped_;
  InFlightStep* sent = step.get();
  steps_.push_back(std::move(step));
  queue_.Submit(*sent->plan, std::move(masks));
  return sent;
}

std::pair<std::unique_ptr<InFlightStep>, absl::StatusOr<pagoda::worker::v1::StepResult>>
StepPipeline::WaitOldest() {
  CHECK(!steps_.empty());
  absl::StatusOr<pagoda::worker::v1::StepResult> result = queue_.WaitOldest();
  std::unique_ptr<InFlightStep> step = std::move(steps_.front());
  steps_.pop_front();
  return {std::move(step), std::move(result)};
}

void StepPipeline::AbandonPendingMasks() {
  for (const std::unique_ptr<InFlightStep>& step : steps_) {
    if (step->pending_masks != nullptr) step->pending_masks->Abandon();
  }
}

void StepPipeline::Retire(std::unique_ptr<SequenceGroup> group) {
  if (steps_.empty()) return;  // Nothing in flight points at it.
  steps_.back()->retired.push_back(std::move(group));
}

}  // namespace pagoda::scheduler

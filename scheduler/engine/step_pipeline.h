#ifndef PAGODA_SCHEDULER_ENGINE_STEP_PIPELINE_H_
#define PAGODA_SCHEDULER_ENGINE_STEP_PIPELINE_H_

// Overlapped scheduling (issue 47; docs/architecture.md, "Overlapped
// scheduling"): the steps the engine has sent and not yet processed, and the
// state changes that let it plan step N + 1 before step N's tokens are back.
//
// The cycle (Engine::StepOverlapped, engine_overlap.cc):
//  1. Schedule and send step N + 1 against the state in which step N's
//     tokens are placeholders (AdvancePastStep made them); rows whose last
//     input is one carry input_from_last_sample (MarkPlaceholders), and the
//     worker writes its own sampled token there.
//  2. Wait for step N's answer and process it (TakeLiveEntries, then the
//     usual append, stop checks, streaming, prefix-cache publication).
//  3. AdvancePastStep(N + 1).
// At most one token per sequence is unknown. A group whose next step needs
// its token on the server first (a fork of n > 1, beam search, drafts, or
// its last token) sits out the step planned meanwhile
// (SequenceGroup::waits_for_tokens). A constrained row, or one with
// multi-token bad words, is planned with a placeholder; its mask (the
// grammar's, the bad words' ban) is built after step 2 (BuildStepMasks, once
// step N's token is in) and follows the plan (DeferredStepMasks). A step
// that may preempt (Scheduler::MayPreempt) is planned only once nothing is
// in flight.

#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/arena.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/engine/sequence.h"
#include "scheduler/workers/async_step_queue.h"
#include "scheduler/workers/worker_group.h"

namespace pagoda::scheduler {

// CPU seconds the calling thread has run.
double ThreadCpuSeconds();

// Clock readings of one step, for its StepRecord.
struct StepClock {
  double start_cpu_seconds = ThreadCpuSeconds();  // The engine thread's clock.
  absl::Time start;
  absl::Time scheduled;  // Schedule() returned.
  absl::Time rpc_start;  // The plan went to the workers.
  absl::Time rpc_end;    // Their answer came back.
  absl::Time end;        // Outputs processed.
};

// The token masks of a sent step, computed on the engine thread once the
// step before it has been processed (its tokens advanced the grammars):
// the sender thread's mask source waits here, while the workers already run
// the step's forward pass (docs/architecture.md, "Overlapped scheduling",
// 7.). Thread-safe.
class DeferredStepMasks {
 public:
  explicit DeferredStepMasks(int64_t step_id) : step_id_(step_id) {}
  // Hands the masks to the waiting source.
  void Fulfil(pagoda::worker::v1::StepMasks masks);
  // The step will never be processed (a failure before it): the source
  // returns masks with no rows, which the workers refuse (if any still
  // runs it), rather than wait for ever.
  void Abandon();
  // The masks, once Fulfil or Abandon ran: the step's StepMaskSource.
  pagoda::worker::v1::StepMasks Wait();

 private:
  const int64_t step_id_;
  absl::Mutex mu_;
  std::optional<pagoda::worker::v1::StepMasks> masks_ ABSL_GUARDED_BY(mu_);
};

// One step sent to the workers whose answer is not processed yet.
struct InFlightStep {
  explicit InFlightStep(SchedulerOutput scheduled);
  google::protobuf::Arena arena;  // Holds the plan.
  pagoda::worker::v1::StepPlan* plan = nullptr;
  SchedulerOutput output;
  StepClock clock;
  // Groups that finished or were cancelled after this step was sent: its
  // entries point at them, so they live until its answer was read.
  std::vector<std::unique_ptr<SequenceGroup>> retired;
  // The masks the plan promised, until the engine built them (null when it
  // promised none or once they were handed over).
  std::shared_ptr<DeferredStepMasks> pending_masks;
};

// Sets input_from_last_sample on the plan's rows whose last input is a
// placeholder. REQUIRES: `plan` was built from `output`.
void MarkPlaceholders(const SchedulerOutput& output, pagoda::worker::v1::StepPlan* plan);

// After `output`'s step was sent and the previous step's tokens processed:
// every row's computed tokens move to its end and each sampling row gets a
// placeholder, as if the step's tokens had arrived; groups whose next step
// needs those tokens first wait instead (and are processed as before when
// they come). Sequences already finished (a late stop, a cancel) are left
// alone: their token in flight is dropped when it arrives. `vocab_size` (0:
// unknown) bounds the multi-token bad words whose ban can follow the plan
// in a mask (BuildStepMasks); a group with more waits.
void AdvancePastStep(const SchedulerOutput& output, int max_model_len, int vocab_size = 0);

// The rows of an answered step that still matter, with their samples.
struct LiveStep {
  SchedulerOutput output;  // Only `scheduled`.
  std::vector<GeneratedToken> sampled;
};
// When `output`'s answer arrives: drops the rows of sequences that finished
// since it was sent (their tokens are never streamed or counted), takes the
// placeholders out and ends the groups' wait, so that OutputProcessor sees
// the state it would have seen without overlap.
LiveStep TakeLiveEntries(const SchedulerOutput& output, std::vector<GeneratedToken> sampled);

// The step will never answer (a failure): undoes AdvancePastStep (when it
// ran), leaving the state as if the step had not been sent.
void AbandonStep(const SchedulerOutput& output);

// The steps in flight, oldest first (two at most, for a moment), sent
// through an AsyncStepQueue. Engine thread only.
class StepPipeline {
 public:
  explicit StepPipeline(WorkerGroup* workers);

  // Sends the step (its plan built) and keeps it; returns it.
  InFlightStep* Send(std::unique_ptr<InFlightStep> step, StepMaskSource masks);
  // Waits for the oldest step's answer. REQUIRES: !empty().
  std::pair<std::unique_ptr<InFlightStep>, absl::StatusOr<pagoda::worker::v1::StepResult>>
  WaitOldest();
  // Abandons the masks of every step in flight that still waits for them
  // (DeferredStepMasks::Abandon): before waiting for steps after a failure.
  void AbandonPendingMasks();
  // Keeps `group` alive until the newest step in flight has answered
  // (dropped at once when none is).
  void Retire(std::unique_ptr<SequenceGroup> group);

  // The oldest step in flight. REQUIRES: !empty().
  InFlightStep* oldest() const { return steps_.front().get(); }
  bool empty() const { return steps_.empty(); }
  int size() const { return static_cast<int>(steps_.size()); }
  // Steps sent while another was still running.
  int64_t num_overlapped() const { return num_overlapped_; }

 private:
  AsyncStepQueue queue_;
  std::deque<std::unique_ptr<InFlightStep>> steps_;
  int64_t num_overlapped_ = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_STEP_PIPELINE_H_

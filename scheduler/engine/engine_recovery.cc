// The Engine's part of worker recovery: what the engine does when its workers
// die (restart them, resume by recomputation, or fail for good) or refuse a
// plan (fail that step's requests, resume the others). The
// Scheduler's part, requeueing every request, is
// Scheduler::RequeueAllForRecompute (scheduler_between_steps.cc). Kept apart
// from engine.cc and scheduler.cc, whose step logic it only borrows.
//
// Why recomputation is exact: a worker keeps no per-request state beyond one
// step, and its sampling draws are keyed on (seed, sample_index) with
// sample_index = the number of tokens the sequence has already generated. A
// requeued sequence is prefilled again over prompt + generated tokens and its
// next draw has the same index as it would have had, so greedy and seeded
// requests continue with exactly the tokens of an uninterrupted run, and the
// stream neither repeats nor skips a token (the step that failed produced
// none).

#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/engine/engine.h"
#include "scheduler/engine/finish_reason.h"

namespace pagoda::scheduler {

void Engine::HandleStepFailure(int64_t step_id, const absl::Status& status,
                               const SchedulerOutput& failed) {
  table_deltas_.Reset();  // The workers dropped their tables with the step.
  sampling_deltas_.Reset();
  if (!workers_->Healthy() || absl::IsUnavailable(status)) {
    LOG(ERROR) << "step " << step_id << ": workers failed: " << status;
    if (!RecoverWorkers()) FailForGood(status);  // engine_recovery.cc
    return;
  }
  // The workers rejected the plan and kept their state (a server bug, not
  // a dead worker). The step's requests fail: sent again, they would be
  // refused again. The engine goes on serving the others: requests that
  // arrived during the step were not part of it (queued, or scheduled into
  // a step sent after it under async scheduling, which was abandoned), and
  // recomputation gives them exactly their tokens (engine_recovery.cc).
  LOG(ERROR) << "step " << step_id << " rejected; failing its requests: " << status;
  const absl::Status failure = absl::InternalError(absl::StrCat("step failed: ", status.message()));
  absl::flat_hash_set<std::string> ids;
  for (const ScheduledSequence& entry : failed.scheduled) ids.insert(entry.group->request_id());
  for (const std::string& id : ids) {
    std::unique_ptr<SequenceGroup> group = scheduler_->AbortRequest(id);
    FinishRequest(id, failure, kFinishReasonError);
    if (group != nullptr) RetireGroup(std::move(group));
  }
  scheduler_->RequeueAllForRecompute();
}

bool Engine::RecoverWorkers() {
  const absl::Time start = absl::Now();
  const int resumed = scheduler_->RequeueAllForRecompute();
  table_deltas_.Reset();  // A restarted worker knows no step: whole tables.
  sampling_deltas_.Reset();
  LOG(WARNING) << "workers failed; restarting them and resuming " << resumed
               << " requests by recomputation";
  // The new workers' LoRA slots are empty; no load may run beside Recover.
  if (lora_ != nullptr) lora_->ResetForRestart();
  const absl::Status recovered = workers_->Recover();
  if (!recovered.ok()) {
    LOG(ERROR) << "workers cannot be recovered: " << recovered;
    absl::MutexLock lock(&mu_);
    failure_reason_ = std::string(recovered.message());
    return false;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  LOG(INFO) << "workers recovered in " << seconds << " s; resuming " << resumed << " requests";
  if (observer_ != nullptr) observer_->OnWorkersRecovered(resumed, seconds);
  PublishSnapshot(nullptr);
  return true;
}

void Engine::FailForGood(const absl::Status& cause) {
  workers_failed_ = true;
  {
    absl::MutexLock lock(&mu_);
    healthy_ = false;
    if (failure_reason_.empty()) failure_reason_ = std::string(cause.message());
  }
  FailAll(absl::UnavailableError(absl::StrCat("workers failed: ", cause.message())));
}

std::string Engine::failure_reason() const {
  absl::MutexLock lock(&mu_);
  if (!failure_reason_.empty()) return failure_reason_;
  return workers_->Healthy() ? "" : "workers are down or restarting";
}

}  // namespace pagoda::scheduler

#ifndef PAGODA_SCHEDULER_WORKERS_ASYNC_STEP_QUEUE_H_
#define PAGODA_SCHEDULER_WORKERS_ASYNC_STEP_QUEUE_H_

// AsyncStepQueue: WorkerGroup::ExecuteStep split into submit and wait, for
// overlapped scheduling (scheduler/engine/step_pipeline.h): the engine sends
// step N + 1 and then processes step N's tokens while N + 1 runs.

#include <deque>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "scheduler/workers/worker_group.h"

namespace pagoda::scheduler {

// Runs a WorkerGroup's steps on a thread of its own, one at a time and in
// the order they were submitted: a step goes out only once the previous one
// has answered, so every rank of a tensor-parallel group receives the steps
// in order (their gRPC calls never race), and a plan whose placeholders
// refer to step S - 1 always reaches ranks that have just run S - 1. The
// worker's idle time between two steps is then the hand-off from the
// previous answer to the next send, not the server's processing.
//
// Thread-compatible: one caller (the engine thread) submits and waits. The
// WorkerGroup must not be called otherwise (Recover, LoadModel) while a step
// is pending.
class AsyncStepQueue {
 public:
  // `workers` must outlive the queue.
  explicit AsyncStepQueue(WorkerGroup* workers);
  ~AsyncStepQueue();  // Waits for the submitted steps, then joins.
  AsyncStepQueue(const AsyncStepQueue&) = delete;
  AsyncStepQueue& operator=(const AsyncStepQueue&) = delete;

  // Queues `plan` for ExecuteStep(plan, masks). `plan` must stay alive and
  // unchanged until its WaitOldest returned.
  void Submit(const pagoda::worker::v1::StepPlan& plan, StepMaskSource masks);
  // ExecuteStep's answer for the oldest step not yet waited for.
  // REQUIRES: num_pending() > 0.
  absl::StatusOr<pagoda::worker::v1::StepResult> WaitOldest();
  // Steps submitted and not yet waited for.
  int num_pending() const;

 private:
  struct Job {
    const pagoda::worker::v1::StepPlan* plan;
    StepMaskSource masks;
    std::optional<absl::StatusOr<pagoda::worker::v1::StepResult>> result;
  };
  void Run();

  WorkerGroup* const workers_;
  mutable absl::Mutex mu_;
  // Oldest first; jobs_[0, num_started_) went out.
  std::deque<std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  size_t num_started_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Started by the first Submit.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_WORKERS_ASYNC_STEP_QUEUE_H_

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
// A group that pipelines its steps (WorkerGroup::SupportsPipelinedSteps: a
// spawned group, tensor-parallel or not, each rank on its ordered step
// channel) gets two threads instead: one sends each
// step as soon as it is submitted, while the step before still runs, and one
// receives the answers in order. Every worker then finds step N + 1 waiting
// when it answers N, and its idle time is only reading the frame.
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

  // Queues `plan` for ExecuteStep(plan, masks), or SendStep and
  // ReceiveStep when pipelined. `plan` must stay alive and unchanged until
  // its WaitOldest returned.
  void Submit(const pagoda::worker::v1::StepPlan& plan, StepMaskSource masks);
  // The answer (ExecuteStep's, or SendStep's error or ReceiveStep's) for
  // the oldest step not yet waited for.
  // REQUIRES: num_pending() > 0.
  absl::StatusOr<pagoda::worker::v1::StepResult> WaitOldest();
  // Steps submitted and not yet waited for.
  int num_pending() const;

 private:
  struct Job {
    const pagoda::worker::v1::StepPlan* plan;
    StepMaskSource masks;
    bool sent = false;         // SendStep (or, not pipelined, ExecuteStep) returned.
    absl::Status send_status;  // Pipelined: SendStep's; not OK, no answer comes.
    std::optional<absl::StatusOr<pagoda::worker::v1::StepResult>> result;
  };
  void Run();
  // The pipelined mode's two threads.
  void SendSteps();
  void ReceiveAnswers();

  WorkerGroup* const workers_;
  mutable absl::Mutex mu_;
  // Oldest first; jobs_[0, num_started_) went out (were sent, when
  // pipelined), and when pipelined, jobs_[0, num_received_) have answers.
  std::deque<std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  size_t num_started_ ABSL_GUARDED_BY(mu_) = 0;
  size_t num_received_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Started by the first Submit: Run's, or the sender and the receiver.
  std::thread thread_;
  std::thread receiver_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_WORKERS_ASYNC_STEP_QUEUE_H_

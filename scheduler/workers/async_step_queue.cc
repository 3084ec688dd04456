#include "scheduler/workers/async_step_queue.h"

#include <utility>

#include "glog/logging.h"

namespace pagoda::scheduler {

AsyncStepQueue::AsyncStepQueue(WorkerGroup* workers) : workers_(workers) {
  CHECK(workers_ != nullptr);
}

AsyncStepQueue::~AsyncStepQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (receiver_.joinable()) receiver_.join();
}

void AsyncStepQueue::Submit(const pagoda::worker::v1::StepPlan& plan, StepMaskSource masks) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(
      std::make_shared<Job>(Job{&plan, std::move(masks), false, absl::OkStatus(), std::nullopt}));
  if (thread_.joinable()) return;
  if (workers_->SupportsPipelinedSteps()) {
    LOG(INFO) << "steps pipelined: each of the " << workers_->world_size()
              << " ranks gets step N + 1 while step N runs";
    thread_ = std::thread([this] { SendSteps(); });
    receiver_ = std::thread([this] { ReceiveAnswers(); });
  } else {
    thread_ = std::thread([this] { Run(); });
  }
}

absl::StatusOr<pagoda::worker::v1::StepResult> AsyncStepQueue::WaitOldest() {
  absl::MutexLock lock(&mu_);
  CHECK(!jobs_.empty()) << "WaitOldest without a submitted step";
  const std::shared_ptr<Job> job = jobs_.front();
  // Sent too: the sender may not touch the plan once this returns.
  auto answered = [&job]() { return job->sent && job->result.has_value(); };
  mu_.Await(absl::Condition(&answered));
  jobs_.pop_front();
  --num_started_;
  if (receiver_.joinable()) --num_received_;
  return *std::move(job->result);
}

int AsyncStepQueue::num_pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

void AsyncStepQueue::Run() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      // Stops only once every submitted step went out and answered.
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return num_started_ < jobs_.size() || stopping_;
      };
      mu_.Await(absl::Condition(&has_work));
      if (num_started_ == jobs_.size()) return;
      job = jobs_[num_started_++];
    }
    // Outside the lock: the caller may submit the next step meanwhile.
    absl::StatusOr<pagoda::worker::v1::StepResult> result =
        workers_->ExecuteStep(*job->plan, job->masks);
    absl::MutexLock lock(&mu_);
    job->sent = true;
    job->result = std::move(result);
  }
}

void AsyncStepQueue::SendSteps() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return num_started_ < jobs_.size() || stopping_;
      };
      mu_.Await(absl::Condition(&has_work));
      if (num_started_ == jobs_.size()) return;
      job = jobs_[num_started_];
    }
    // Outside the lock, while the step before may still run on the worker.
    absl::Status sent = workers_->SendStep(*job->plan, job->masks);
    absl::MutexLock lock(&mu_);
    job->sent = true;
    job->send_status = std::move(sent);
    ++num_started_;
  }
}

void AsyncStepQueue::ReceiveAnswers() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      // Stops only once the sender is done and every sent step answered.
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return num_received_ < num_started_ || (stopping_ && num_started_ == jobs_.size());
      };
      mu_.Await(absl::Condition(&has_work));
      if (num_received_ == num_started_) return;
      job = jobs_[num_received_];
      if (!job->send_status.ok()) {  // Nothing went out: no answer to read.
        job->result = job->send_status;
        ++num_received_;
        continue;
      }
    }
    absl::StatusOr<pagoda::worker::v1::StepResult> result = workers_->ReceiveStep();
    absl::MutexLock lock(&mu_);
    job->result = std::move(result);
    ++num_received_;
  }
}

}  // namespace pagoda::scheduler

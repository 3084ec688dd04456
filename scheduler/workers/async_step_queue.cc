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
}

void AsyncStepQueue::Submit(const pagoda::worker::v1::StepPlan& plan, StepMaskSource masks) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(std::make_shared<Job>(Job{&plan, std::move(masks), std::nullopt}));
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

absl::StatusOr<pagoda::worker::v1::StepResult> AsyncStepQueue::WaitOldest() {
  absl::MutexLock lock(&mu_);
  CHECK(!jobs_.empty()) << "WaitOldest without a submitted step";
  const std::shared_ptr<Job> job = jobs_.front();
  auto answered = [&job]() { return job->result.has_value(); };
  mu_.Await(absl::Condition(&answered));
  jobs_.pop_front();
  --num_started_;
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
    job->result = std::move(result);
  }
}

}  // namespace pagoda::scheduler

// AsyncStepQueue: Submit returns while the step runs, steps go out one at a
// time in submission order (each only after the previous answered), and
// WaitOldest hands back each step's own answer, errors included; a group
// that pipelines its steps gets the next step sent while one still runs.
#include "scheduler/workers/async_step_queue.h"

#include <deque>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

// Answers each plan with its step_id after `gate` (for step 0), recording
// the order of the calls and whether two ever overlapped.
class RecordingWorkers : public WorkerGroup {
 public:
  absl::StatusOr<wv1::LoadModelResponse> LoadModel(const wv1::LoadModelRequest&) override {
    return wv1::LoadModelResponse();
  }
  absl::Status InitCache(const wv1::InitCacheRequest&) override { return absl::OkStatus(); }
  absl::StatusOr<wv1::StepResult> ExecuteStep(const wv1::StepPlan& plan,
                                              const StepMaskSource& masks) override {
    {
      absl::MutexLock lock(&mu_);
      if (running_) overlapped_ = true;
      running_ = true;
      order_.push_back(plan.step_id());
    }
    if (plan.step_id() == 0) gate.WaitForNotificationWithTimeout(absl::Seconds(20));
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (plan.step_id() == 2) return absl::UnavailableError("rank 0 died");
    wv1::StepResult result;
    result.set_step_id(plan.step_id());
    return result;
  }
  bool Healthy() const override { return true; }
  int world_size() const override { return 1; }
  void Shutdown() override {}

  std::vector<int64_t> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }
  bool overlapped() {
    absl::MutexLock lock(&mu_);
    return overlapped_;
  }
  absl::Notification gate;

 private:
  absl::Mutex mu_;
  std::vector<int64_t> order_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool overlapped_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(AsyncStepQueueTest, RunsStepsInOrderOneAtATimeAndAnswersEach) {
  RecordingWorkers workers;
  std::vector<wv1::StepPlan> plans(4);
  for (int i = 0; i < 4; ++i) plans[i].set_step_id(i);
  AsyncStepQueue queue(&workers);
  // Step 0 is held inside the worker: the later submits must not wait.
  for (const wv1::StepPlan& plan : plans) queue.Submit(plan, nullptr);
  EXPECT_EQ(queue.num_pending(), 4);
  EXPECT_LE(workers.order().size(), 1u);  // Step 0 at most, still held.
  workers.gate.Notify();
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<wv1::StepResult> result = queue.WaitOldest();
    if (i == 2) {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
      continue;
    }
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->step_id(), i);
  }
  EXPECT_EQ(queue.num_pending(), 0);
  EXPECT_EQ(workers.order(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_FALSE(workers.overlapped());
}

TEST(AsyncStepQueueTest, DestructorWaitsForStepsNobodyWaitedFor) {
  RecordingWorkers workers;
  workers.gate.Notify();
  std::vector<wv1::StepPlan> plans(2);
  plans[1].set_step_id(1);
  {
    AsyncStepQueue queue(&workers);
    for (const wv1::StepPlan& plan : plans) queue.Submit(plan, nullptr);
  }
  EXPECT_EQ(workers.order(), (std::vector<int64_t>{0, 1}));
}

// Pipelines: SendStep records the plan (step 2's send fails), ReceiveStep
// answers the oldest recorded plan with its step_id, step 0 only after
// `gate`.
class PipelinedWorkers : public RecordingWorkers {
 public:
  bool SupportsPipelinedSteps() const override { return true; }
  absl::Status SendStep(const wv1::StepPlan& plan, const StepMaskSource&) override {
    absl::MutexLock lock(&mu_);
    if (plan.step_id() == 2) return absl::UnavailableError("the channel broke");
    sent_.push_back(plan.step_id());
    unanswered_.push_back(plan.step_id());
    return absl::OkStatus();
  }
  absl::StatusOr<wv1::StepResult> ReceiveStep() override {
    int64_t step_id;
    {
      absl::MutexLock lock(&mu_);
      if (unanswered_.empty()) return absl::InternalError("a receive with nothing sent");
      step_id = unanswered_.front();
      unanswered_.pop_front();
    }
    if (step_id == 0) gate.WaitForNotificationWithTimeout(absl::Seconds(20));
    wv1::StepResult result;
    result.set_step_id(step_id);
    return result;
  }
  // Waits (up to 20 s) until `n` plans were sent; returns them.
  std::vector<int64_t> WaitForSent(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return sent_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
    return sent_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> sent_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> unanswered_ ABSL_GUARDED_BY(mu_);
};

TEST(AsyncStepQueueTest, PipelinedGroupGetsTheNextStepWhileOneRuns) {
  PipelinedWorkers workers;
  std::vector<wv1::StepPlan> plans(4);
  for (int i = 0; i < 4; ++i) plans[i].set_step_id(i);
  AsyncStepQueue queue(&workers);
  for (const wv1::StepPlan& plan : plans) queue.Submit(plan, nullptr);
  // Step 0's answer is held, yet steps 1 and 3 went out behind it, in order.
  EXPECT_EQ(workers.WaitForSent(3), (std::vector<int64_t>{0, 1, 3}));
  workers.gate.Notify();
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<wv1::StepResult> result = queue.WaitOldest();
    if (i == 2) {  // Its send failed: that error, and no answer read for it.
      EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
      continue;
    }
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->step_id(), i);
  }
  EXPECT_EQ(queue.num_pending(), 0);
  EXPECT_TRUE(workers.order().empty());  // ExecuteStep never called.
}

}  // namespace
}  // namespace pagoda::scheduler

#include "scheduler/api/call_tracker.h"

namespace pagoda::scheduler {

void CallTracker::Begin() {
  absl::MutexLock lock(&mu_);
  ++active_;
}

void CallTracker::End() {
  absl::MutexLock lock(&mu_);
  --active_;
}

int CallTracker::active() {
  absl::MutexLock lock(&mu_);
  return active_;
}

bool CallTracker::WaitUntilIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return active_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

}  // namespace pagoda::scheduler

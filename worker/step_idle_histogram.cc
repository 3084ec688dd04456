#include "worker/step_idle_histogram.h"

#include <algorithm>

namespace pagoda::worker {

void StepIdleHistogram::StepStarted(absl::Time now) {
  absl::MutexLock lock(&mutex_);
  if (!last_end_.has_value()) return;
  // A clock that steps back counts as no gap rather than a negative one.
  const double gap = std::max(0.0, absl::ToDoubleSeconds(now - *last_end_));
  last_end_.reset();
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (gap <= kBounds[i]) ++observed_.cumulative[i];
  }
  ++observed_.count;
  observed_.sum_seconds += gap;
}

void StepIdleHistogram::StepEnded(absl::Time now) {
  absl::MutexLock lock(&mutex_);
  last_end_ = now;
}

StepIdleHistogram::Snapshot StepIdleHistogram::Read() const {
  absl::MutexLock lock(&mutex_);
  return observed_;
}

}  // namespace pagoda::worker

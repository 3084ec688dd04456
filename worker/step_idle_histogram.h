#ifndef PAGODA_WORKER_STEP_IDLE_HISTOGRAM_H_
#define PAGODA_WORKER_STEP_IDLE_HISTOGRAM_H_

// StepIdleHistogram: the device's idle time between steps, which
// pagoda_worker_idle_between_steps_seconds exports: from the end of one
// step (its forward pass and sampling done, the runner call returned) to the
// start of the next one's runner call. Without overlap the gap holds the
// server's host work and two RPC legs; with overlapped scheduling the next
// plan is already waiting, so the gap shrinks to the worker's own handoff.

#include <array>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pagoda::worker {

class StepIdleHistogram {
 public:
  // Upper bounds in seconds, 50 µs to 1 s: the gap is host work, from a
  // handoff of microseconds to a busy server's milliseconds.
  static constexpr std::array<double, 12> kBounds = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3,
                                                     5e-3,  10e-3,  25e-3,  50e-3,  100e-3, 1.0};

  struct Snapshot {
    // Observations at or below kBounds[i] (cumulative, as Prometheus
    // buckets are); `count` holds the +Inf bucket.
    std::array<uint64_t, kBounds.size()> cumulative{};
    uint64_t count = 0;
    double sum_seconds = 0;
  };

  // A step starts at `now`: observes the gap since the previous step ended,
  // if one did (the first step after start has no gap to count).
  void StepStarted(absl::Time now);
  // The step that started last ended at `now`.
  void StepEnded(absl::Time now);
  // Thread-safe: a scrape reads while steps run.
  Snapshot Read() const;

 private:
  mutable absl::Mutex mutex_;
  std::optional<absl::Time> last_end_ ABSL_GUARDED_BY(mutex_);
  Snapshot observed_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_STEP_IDLE_HISTOGRAM_H_

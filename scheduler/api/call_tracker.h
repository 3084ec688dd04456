// Counts the calls a front door has not finished answering, so that drain
// can wait for in-flight responses to reach their clients before the
// servers close. Shared by the gRPC reactors and the HTTP routes.
#ifndef PAGODA_SCHEDULER_API_CALL_TRACKER_H_
#define PAGODA_SCHEDULER_API_CALL_TRACKER_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pagoda::scheduler {

// Counts Generate calls that gRPC (or completions that HTTP) has not
// finished with yet (a stream whose engine work is done may still be
// writing). Drain waits for zero. Thread-safe.
class CallTracker {
 public:
  void Begin();
  void End();
  // True if no call is active within `timeout`.
  bool WaitUntilIdle(absl::Duration timeout);
  // The calls active now (vLLM's /load reads the completions').
  int active();

 private:
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_CALL_TRACKER_H_

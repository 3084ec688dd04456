#ifndef PAGODA_WORKER_STEP_CANCELLATION_H_
#define PAGODA_WORKER_STEP_CANCELLATION_H_

// StepCancellation: a step's gRPC call watched for the server's cancel, so a
// rank stuck in a collective aborts at once.

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace pagoda::worker {

// Watches the gRPC call of the step in progress and runs `on_cancel` once if
// the server cancels it. The server cancels a step when it gave up on it (a
// peer rank failed, or the step deadline passed); a rank stuck in a
// collective on a silent peer then aborts at once instead of waiting out the
// collective timeout. The synchronous gRPC API has no cancellation callback,
// so one thread polls the watched call every `period`.
//
// Thread-safe. One call is watched at a time.
class StepCancellationWatcher {
 public:
  explicit StepCancellationWatcher(absl::Duration period = absl::Milliseconds(10));
  // Joins the thread. REQUIRES: nothing is being watched.
  ~StepCancellationWatcher();
  StepCancellationWatcher(const StepCancellationWatcher&) = delete;
  StepCancellationWatcher& operator=(const StepCancellationWatcher&) = delete;

  // Watches `context` (which must outlive the matching End) until End.
  // `on_cancel` runs on the watcher's thread; it must not call Begin or End.
  void Begin(grpc::ServerContext* context, std::function<void()> on_cancel);
  // Stops watching; if `on_cancel` is running, waits for it to return.
  void End();

 private:
  void Loop();

  const absl::Duration period_;
  absl::Mutex mutex_;
  grpc::ServerContext* context_ ABSL_GUARDED_BY(mutex_) = nullptr;
  std::function<void()> on_cancel_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_STEP_CANCELLATION_H_

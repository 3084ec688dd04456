// Which server owns this worker (wire/worker_owner.h): the first LoadModel
// binds it; every later call must come from the same owner id, or it is
// refused with FAILED_PRECONDITION and changes nothing. The owner lets go by
// its Shutdown, or by going silent (no call, heartbeats included) for longer
// than the timeout, after which another server's LoadModel may take over.
#ifndef PAGODA_WORKER_WORKER_OWNERSHIP_H_
#define PAGODA_WORKER_WORKER_OWNERSHIP_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pagoda::worker {

// Thread-safe.
class WorkerOwnership {
 public:
  explicit WorkerOwnership(absl::Duration timeout) : timeout_(timeout) {}

  // LoadModel: binds the worker to `owner` if nobody owns it, `owner` already
  // does, or the owner has been silent past the timeout. INVALID_ARGUMENT for
  // a malformed id, FAILED_PRECONDITION while another server owns it.
  absl::Status Claim(absl::string_view owner, absl::Time now);
  // Every other call: OK for the owner (its lease renewed) or while nobody
  // owns the worker; else as Claim.
  absl::Status Check(absl::string_view owner, absl::Time now);
  // The owner's Shutdown: nobody owns the worker afterwards. Anyone else's
  // is a no-op (Check refuses it first).
  void Release(absl::string_view owner);

 private:
  absl::Status Refusal(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const absl::Duration timeout_;
  absl::Mutex mutex_;
  std::string owner_ ABSL_GUARDED_BY(mutex_);  // Empty: nobody owns it.
  absl::Time last_seen_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WORKER_OWNERSHIP_H_

#ifndef PAGODA_WORKER_STEP_MASK_MAILBOX_H_
#define PAGODA_WORKER_STEP_MASK_MAILBOX_H_

// StepMaskMailbox: where a worker's SendStepMasks calls meet the step that
// waits for its token masks.

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::worker {

// Where a gRPC worker's SendStepMasks calls meet the step that waits for
// them: the step's call and the masks' call run on two server threads, in
// either order. Holds one StepMasks at most (a newer one replaces it), so a
// hostile or confused server cannot make it grow.
//
// A step Begins (its id), may Await its masks, and Ends. Masks of an
// earlier step that nobody took (its plan was refused before it waited)
// are dropped when a later step begins. Masks for any other step than the
// one in progress (or the next to begin, when they came first) refuse that
// step: Await returns INVALID_ARGUMENT (the server sends a step's masks only
// between its plan and its result, so they can only be a server's
// mistake). Deliver itself never fails: whether masks meet their step
// running or before it begins is a matter of timing, which differs between
// the ranks of a group, and their verdicts must agree.
//
// Thread-safe.
class StepMaskMailbox {
 public:
  StepMaskMailbox() = default;
  StepMaskMailbox(const StepMaskMailbox&) = delete;
  StepMaskMailbox& operator=(const StepMaskMailbox&) = delete;

  // A step starts: masks held for it stay, older ones go.
  void Begin(int64_t step_id);
  // The step ended; masks that came for it unused are dropped at the next
  // Begin.
  void End();
  // SendStepMasks: keeps `masks` for (or hands them to) their step, or
  // marks the step in progress refused when they are another step's.
  void Deliver(pagoda::worker::v1::StepMasks masks);
  // The masks of the step in progress, once they are here. Errors:
  // INVALID_ARGUMENT (another step's masks came), DEADLINE_EXCEEDED at
  // `deadline`, CANCELLED after Cancel. REQUIRES: between Begin and End.
  absl::StatusOr<pagoda::worker::v1::StepMasks> Await(absl::Time deadline);
  // Ends the step's wait (now or when it starts) with CANCELLED: the server
  // gave the step up. Begin clears it.
  void Cancel();

 private:
  bool Arrived() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  absl::Mutex mutex_;
  bool in_step_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t step_id_ ABSL_GUARDED_BY(mutex_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  // Why the step in progress is refused (masks of another step came).
  absl::Status mismatch_ ABSL_GUARDED_BY(mutex_);
  std::optional<pagoda::worker::v1::StepMasks> held_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_STEP_MASK_MAILBOX_H_

#ifndef PAGODA_SCHEDULER_ENGINE_REQUEST_SINK_H_
#define PAGODA_SCHEDULER_ENGINE_REQUEST_SINK_H_

// RequestSink: the interface through which the engine delivers one request's
// deltas and its end to the front door that submitted it.

#include "absl/status/status.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

// Where the engine delivers one request's progress. The engine calls these
// methods from its own thread only, so an implementation must never block
// (queue the delta and notify its own consumer instead).
//
// Call order: zero or more OnDelta, then exactly one OnFinish, then nothing.
// An accepted request always receives OnFinish: OK after its last delta
// (whose sequences carry their final statuses), CANCELLED after an abort,
// INVALID_ARGUMENT when it can never be scheduled, UNAVAILABLE when the
// workers failed or the server shut down.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void OnDelta(const RequestDelta& delta) = 0;
  virtual void OnFinish(const absl::Status& status) = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_REQUEST_SINK_H_

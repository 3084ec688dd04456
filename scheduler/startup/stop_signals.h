#ifndef PAGODA_SCHEDULER_STARTUP_STOP_SIGNALS_H_
#define PAGODA_SCHEDULER_STARTUP_STOP_SIGNALS_H_

// How pagoda-server learns it must stop: SIGTERM or SIGINT, blocked in every
// thread (BlockStopSignals, first thing in main) and waited for by one, so
// the drain runs in ordinary code rather than in a signal handler.

#include "absl/time/time.h"
#include "scheduler/workers/grpc_worker_group.h"

namespace pagoda::scheduler {

// Blocks SIGTERM and SIGINT in the calling thread and so in every thread it
// starts afterwards. Call before any thread is started.
void BlockStopSignals();

// Waits up to `timeout` for SIGTERM or SIGINT; returns the signal, or 0 at
// the timeout.
int WaitForStopSignal(absl::Duration timeout);

// Waits for a stop signal (returned) or for `workers` to be given up on
// (returns 0).
int WaitForStopSignalOrGivenUpWorkers(const GrpcWorkerGroup& workers);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_STOP_SIGNALS_H_

#include "scheduler/startup/stop_signals.h"

#include <pthread.h>
#include <signal.h>

#include "absl/time/clock.h"

namespace pagoda::scheduler {
namespace {

// How often a wait for a stop signal looks whether the workers were given
// up on.
constexpr absl::Duration kGivenUpCheckPeriod = absl::Milliseconds(200);

sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

}  // namespace

void BlockStopSignals() {
  const sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int WaitForStopSignal(absl::Duration timeout) {
  const sigset_t signals = StopSignals();
  const absl::Time deadline = absl::Now() + timeout;
  for (absl::Duration left = timeout; left > absl::ZeroDuration(); left = deadline - absl::Now()) {
    const timespec wait = absl::ToTimespec(left);
    const int signal_number = sigtimedwait(&signals, nullptr, &wait);
    if (signal_number > 0) return signal_number;  // Else a timeout or EINTR.
  }
  return 0;
}

int WaitForStopSignalOrGivenUpWorkers(const GrpcWorkerGroup& workers) {
  while (!workers.given_up()) {
    if (const int signal_number = WaitForStopSignal(kGivenUpCheckPeriod); signal_number != 0) {
      return signal_number;
    }
  }
  return 0;
}

}  // namespace pagoda::scheduler

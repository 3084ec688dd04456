// The production ApplyRunnerTestHooks: nothing to change.
#include "worker/runner_factory.h"

namespace pagoda::worker {

void ApplyRunnerTestHooks(int /*rank*/, CpuModelRunnerOptions* /*options*/) {}

}  // namespace pagoda::worker

// ApplyRunnerTestHooks of pagoda-worker-fault-injecting: the CPU runner's
// backend faults as the environment says (tests/fakes/fault_injecting_backend.h).
#include "tests/fakes/fault_injecting_backend.h"
#include "worker/runner_factory.h"

namespace pagoda::worker {

void ApplyRunnerTestHooks(int rank, CpuModelRunnerOptions* options) {
  const testing::FaultPlan plan = testing::FaultPlanFromEnvironment(rank);
  if (plan.fail_at_step <= 0) return;
  options->wrap_backend = [plan](std::unique_ptr<Backend> backend) {
    return testing::WrapWithFaults(std::move(backend), plan);
  };
}

}  // namespace pagoda::worker

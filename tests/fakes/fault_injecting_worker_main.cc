// main() of pagoda-worker-fault-injecting: the worker process of pagoda-worker
// with runner hooks injected that make the CPU runner's backend fault as the
// environment says (tests/fakes/fault_injecting_backend.h).
#include <memory>
#include <utility>

#include "tests/fakes/fault_injecting_backend.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/runner_factory.h"
#include "worker/worker_process.h"

namespace {

void WrapBackendWithFaults(int rank, pagoda::worker::CpuModelRunnerOptions* options) {
  const pagoda::testing::FaultPlan plan = pagoda::testing::FaultPlanFromEnvironment(rank);
  if (plan.fail_at_step <= 0) return;
  options->wrap_backend = [plan](std::unique_ptr<pagoda::worker::Backend> backend) {
    return pagoda::testing::WrapWithFaults(std::move(backend), plan);
  };
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::worker::RunnerHooks hooks;
  hooks.adjust_cpu_options = WrapBackendWithFaults;
  return pagoda::worker::RunWorkerProcess(argc, argv, hooks);
}

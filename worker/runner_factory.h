#ifndef PAGODA_WORKER_RUNNER_FACTORY_H_
#define PAGODA_WORKER_RUNNER_FACTORY_H_

// The one place pagoda-worker picks its ModelRunner by --device (the
// LoadModel request's device): "cpu" (or empty) is the CPU runner; "cuda"
// the CUDA runner when this build has it (nvcc at build time), else
// FAILED_PRECONDITION saying so; anything else INVALID_ARGUMENT.

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

// True when this build has the CUDA runner.
bool BuiltWithCuda();

// What the program around the factory injects into it, as LevelDB's Env is
// injected into a DB: pagoda-worker injects none (RunnerHooks{}, the default);
// a test build injects hooks that change the runners it makes
// (tests/fakes/fault_injecting_worker_main.cc wraps the CPU backend so that it
// faults where the environment says). No request reaches them.
struct RunnerHooks {
  // Changes the options of rank `rank`'s CPU runner before it is made; unset:
  // the options are used as given.
  std::function<void(int rank, CpuModelRunnerOptions* options)> adjust_cpu_options;
};

// cuda_device: --cuda-device (-1 = the rank's GPU); ignored for "cpu".
// cpu_options: the CPU runner's (where its collectives listen); ignored for "cuda".
// hooks and rank: what the CPU runner of this rank is changed by (none by default).
absl::StatusOr<std::unique_ptr<ModelRunner>> MakeModelRunner(
    const std::string& device, int cuda_device, const CpuModelRunnerOptions& cpu_options = {},
    const RunnerHooks& hooks = {}, int rank = 0);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_RUNNER_FACTORY_H_

#ifndef PAGODA_WORKER_RUNNER_FACTORY_H_
#define PAGODA_WORKER_RUNNER_FACTORY_H_

// The one place pagoda-worker picks its ModelRunner by --device (the
// LoadModel request's device): "cpu" (or empty) is the CPU runner; "cuda"
// the CUDA runner when this build has it (nvcc at build time), else
// FAILED_PRECONDITION saying so; anything else INVALID_ARGUMENT.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

// True when this build has the CUDA runner.
bool BuiltWithCuda();

// Lets a test build of pagoda-worker change the CPU runner's options for
// rank `rank` (tests/fakes/fault_injecting_backend.h wraps its backend).
// pagoda-worker links worker/runner_hooks_none.cc, which changes nothing:
// no fault injection exists in a production build.
void ApplyRunnerTestHooks(int rank, CpuModelRunnerOptions* options);

// cuda_device: --cuda-device (-1 = the rank's GPU); ignored for "cpu".
// cpu_options: the CPU runner's (where its collectives listen); ignored for "cuda".
absl::StatusOr<std::unique_ptr<ModelRunner>> MakeModelRunner(
    const std::string& device, int cuda_device, const CpuModelRunnerOptions& cpu_options = {});

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_RUNNER_FACTORY_H_

#include "worker/runner_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#if PAGODA_WORKER_HAS_CUDA
#include "worker/cuda/cuda_model_runner.h"
#endif

namespace pagoda::worker {

bool BuiltWithCuda() { return PAGODA_WORKER_HAS_CUDA; }

absl::StatusOr<std::unique_ptr<ModelRunner>> MakeModelRunner(
    const std::string& device, int cuda_device, const CpuModelRunnerOptions& cpu_options,
    const RunnerHooks& hooks, int rank) {
  if (device.empty() || device == "cpu") {
    CpuModelRunnerOptions options = cpu_options;
    if (hooks.adjust_cpu_options) hooks.adjust_cpu_options(rank, &options);
    return CreateCpuModelRunner(options);
  }
  if (device == "cuda") {
#if PAGODA_WORKER_HAS_CUDA
    return CreateCudaModelRunner(CudaRunnerOptions{.device = cuda_device});
#else
    return absl::FailedPreconditionError(
        "--device cuda: this pagoda-worker was built without CUDA (no nvcc at build time); "
        "rebuild with the CUDA toolkit or use --device cpu");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device '", device, "' is not supported (expected cpu or cuda)"));
}

}  // namespace pagoda::worker

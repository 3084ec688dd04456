#ifndef PAGODA_WORKER_CPU_CPU_MODEL_RUNNER_H_
#define PAGODA_WORKER_CPU_CPU_MODEL_RUNNER_H_

#include <memory>
#include <string>

#include "worker/model_runner.h"

namespace pagoda::worker {

struct CpuModelRunnerOptions {
  // The address this worker's Gloo connections listen on when it is one
  // rank of several: its peers must reach it.
  std::string collective_host = "127.0.0.1";
};

// The CPU backend (f32 activations, SIMD matrix products); tensor parallel
// over Gloo when LoadModel's world_size exceeds 1.
std::unique_ptr<ModelRunner> CreateCpuModelRunner(const CpuModelRunnerOptions& options = {});

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_CPU_MODEL_RUNNER_H_

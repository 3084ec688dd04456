#ifndef PAGODA_WORKER_CPU_CPU_MODEL_RUNNER_H_
#define PAGODA_WORKER_CPU_CPU_MODEL_RUNNER_H_

// CpuModelRunner: the ModelRunner of the CPU device, its options and the
// tensor-parallel group it joins.

#include <functional>
#include <memory>
#include <string>

#include "worker/backend.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

struct CpuModelRunnerOptions {
  // The address this worker's collective connections listen on when it is one
  // rank of several: its peers must reach it.
  std::string collective_host = "127.0.0.1";
  // Wraps the backend a LoadModel makes (null: used as is). Set only by code
  // linked into a test binary (tests/fakes/fault_injecting_backend.h); no
  // request reaches it.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> wrap_backend;
};

// The CPU backend (f32 activations, SIMD matrix products); tensor parallel
// over TCP (comm/tcp_communicator.h) when LoadModel's world_size exceeds 1.
std::unique_ptr<ModelRunner> CreateCpuModelRunner(const CpuModelRunnerOptions& options = {});

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_CPU_MODEL_RUNNER_H_

#ifndef PAGODA_SCHEDULER_STARTUP_WORKER_STARTUP_H_
#define PAGODA_SCHEDULER_STARTUP_WORKER_STARTUP_H_

// Start-up: the workers, spawned or connected, given the model to load and
// then the KV cache their profiling allows.

#include <memory>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "scheduler/config/server_config.h"
#include "scheduler/workers/grpc_worker_group.h"

namespace pagoda::scheduler {

// What the workers reported once the model was loaded, and the KV cache they
// were given.
struct WorkerCache {
  int max_model_len = 0;  // The config's, cut to what the workers serve.
  int num_gpu_blocks = 0;
  int num_cpu_blocks = 0;
};

// Spawns the workers (printing "PAGODA_WORKER_PIDS <pid>,..." for
// launchers) or connects to --worker-addresses ones.
// REQUIRES: ResolveForModel(model, config) succeeded.
absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> StartWorkers(const ServerConfig& config,
                                                              const ModelConfig& model);

// The LoadModel request every worker gets: the model, the cache and batch
// bounds, the dtypes, and the speculative and LoRA settings their
// workspaces and slots are sized for at load.
pagoda::worker::v1::LoadModelRequest MakeLoadModelRequest(const ServerConfig& config);

// Has the workers load the model, then gives them the KV cache their
// profiling (or --num-gpu-blocks-override) and --swap-space allow.
absl::StatusOr<WorkerCache> LoadModelOnWorkers(const ServerConfig& config,
                                               GrpcWorkerGroup& workers);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_WORKER_STARTUP_H_

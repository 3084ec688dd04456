#ifndef PAGODA_SCHEDULER_STARTUP_SERVING_H_
#define PAGODA_SCHEDULER_STARTUP_SERVING_H_

// Start-up's last stage: the engine over the ready workers, the front doors
// over the engine, serving until a stop signal, then the drain.

#include "absl/status/status.h"
#include "scheduler/config/server_config.h"
#include "scheduler/kv_events/publisher.h"
#include "scheduler/lora/lora_registry.h"
#include "scheduler/metrics.h"
#include "scheduler/startup/model_files.h"
#include "scheduler/startup/worker_startup.h"
#include "scheduler/workers/grpc_worker_group.h"

namespace pagoda::scheduler {

// Runs the engine and the front doors until a stop signal, then drains and
// returns OK; or until the workers are given up on, then returns why (after
// --worker-failure-exit-delay). `metrics` and `kv_events` may be null;
// `lora_registry` (the served LoRA adapters) is the engine's and the front
// doors' (Services in serving.cc) and must outlive the call.
absl::Status ServeUntilStopSignal(const ServerConfig& config, const ModelFiles& model,
                                  const WorkerCache& cache, ServerMetrics* metrics,
                                  KvEventPublisher* kv_events, GrpcWorkerGroup& workers,
                                  lora::LoraRegistry* lora_registry);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_SERVING_H_

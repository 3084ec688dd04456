#ifndef PAGODA_SCHEDULER_STARTUP_FRONT_DOORS_H_
#define PAGODA_SCHEDULER_STARTUP_FRONT_DOORS_H_

// Start-up: the ports clients and Prometheus reach (gRPC, OpenAI HTTP,
// /metrics), each announced on stdout ("PAGODA_SERVER_LISTENING <port>",
// "PAGODA_HTTP_LISTENING", "PAGODA_METRICS_LISTENING") so launchers that
// asked for port 0 learn it.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/api/frontend.h"
#include "scheduler/api/http_server.h"
#include "scheduler/api/request_path.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/api/vllm_engine_service.h"
#include "scheduler/config/server_config.h"
#include "scheduler/engine/engine.h"
#include "scheduler/metrics.h"
#include "scheduler/startup/model_files.h"

namespace pagoda::scheduler {

// Text requests that may wait for a tokenizer thread, in the front doors'
// one pool (RequestPath): as many as may wait in the engine's queue, so that no pool refuses
// (429) a request the queue would still take (a burst of text prompts from
// vLLM's benchmark client at 700 concurrent found a fixed 256 full with the
// queue far from its limit).
inline int MaxPendingTokenizations(const ServerConfig& config) {
  return config.scheduling.max_queued_requests;
}

// OK when `host`:`port` can be bound now (port <= 0: the OS picks, always
// OK); else UNAVAILABLE in one line: "--FLAG PORT: HOST:PORT is in use".
// Run before any worker starts, so a busy port costs no model load.
absl::Status CheckPortFree(absl::string_view flag, const std::string& host, int port);

// Every configured port of `door`, by CheckPortFree.
absl::Status CheckFrontDoorPortsFree(const FrontDoorOptions& door);

// The /metrics endpoint, or null when --metrics-port is 0.
absl::StatusOr<std::unique_ptr<ServerMetrics>> StartMetrics(const FrontDoorOptions& door,
                                                            const std::string& model_name);

// The gRPC port: pagoda.v1.Generation, and VllmEngine when `vllm_service`
// is not null. Everything passed must outlive the server.
absl::StatusOr<std::unique_ptr<FrontendServer>> StartGrpcFrontend(
    const FrontDoorOptions& door, const ModelLimits& limits, GenerationService* service,
    VllmEngineService* vllm_service, ServerMetrics* metrics, Engine* engine);

// The OpenAI-compatible endpoint, or null when --http-port is 0.
absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpFrontend(
    const ServerConfig& config, const std::string& model_name, const ModelFiles& model,
    int max_model_len, ServerMetrics* metrics, RequestPath* path);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_FRONT_DOORS_H_

#ifndef PAGODA_SCHEDULER_GATEWAY_H_
#define PAGODA_SCHEDULER_GATEWAY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "scheduler/api/frontend.h"
#include "scheduler/api/vllm_engine_service.h"
#include "scheduler/engine/engine.h"
#include "scheduler/kv_events/publisher.h"
#include "scheduler/metrics.h"

// What plugs pagoda-server into the systems built around vLLM (the Gateway
// API Inference Extension's endpoint picker, llm-d's KV-cache-aware routing,
// production-stack's router): its flags and start-up, kept apart from
// server_main.cc. docs/metrics.md and docs/kv-events.md describe them.
namespace pagoda::scheduler {

// Rewrites vLLM-style negations of this file's boolean flags
// (--no-vllm-metric-names) to Abseil's (--novllm_metric_names), in place.
void AcceptGatewayFlagSpellings(int argc, char** argv);

// --vllm-metric-names (on by default).
bool VllmMetricNamesEnabled();

// The --kv-events-endpoint publisher, or null when the flag is empty.
// Prints "PAGODA_KV_EVENTS_REPLAY_ENDPOINT <endpoint>" with a replay socket.
// INVALID_ARGUMENT without `prefix_caching` (there would be no events).
absl::StatusOr<std::unique_ptr<KvEventPublisher>> StartKvEventPublisher(
    const std::string& model_name, bool prefix_caching);

// Wires the publisher to the engine (before Engine::Start) and, with
// metrics on, serves the engine's cached block hashes at
// /kv_cache/block_hashes on the metrics port, for checking subscribers. The
// returned handle detaches that page when destroyed: destroy it before the
// engine. Either pointer may be null.
class KvEventsAttachment;
std::unique_ptr<KvEventsAttachment> AttachKvEvents(Engine& engine, KvEventPublisher* publisher,
                                                   ServerMetrics* metrics);
class KvEventsAttachment {
 public:
  virtual ~KvEventsAttachment() = default;
};

// vllm.grpc.engine.VllmEngine for the gRPC port, or null with
// --no-vllm-grpc-api. Arguments as GenerationService's.
std::unique_ptr<VllmEngineService> MakeVllmEngineService(const ServedModelInfo& info,
                                                         Engine* engine,
                                                         RequestValidator* validator,
                                                         const Tokenizer* tokenizer,
                                                         const GenerationOptions& options);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_GATEWAY_H_

#ifndef PAGODA_SCHEDULER_STARTUP_KV_EVENTS_WIRING_H_
#define PAGODA_SCHEDULER_STARTUP_KV_EVENTS_WIRING_H_

// Start-up: the KV event publisher that prefix-aware routers (llm-d's
// KV-cache indexer, the inference gateway's scorers) subscribe to, wired to
// the engine, and the page of cached block hashes that checks them.
// docs/kv-events.md describes both.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "scheduler/config/server_config.h"
#include "scheduler/engine/engine.h"
#include "scheduler/kv_events/publisher.h"
#include "scheduler/lora/lora_registry.h"
#include "scheduler/metrics.h"

namespace pagoda::scheduler {

// The publisher, or null when the endpoint is empty. Prints
// "PAGODA_KV_EVENTS_REPLAY_ENDPOINT <endpoint>" with a replay socket. An
// adapter's blocks carry its name from `lora_registry` (may be null; must
// outlive the publisher).
// REQUIRES: CheckServerConfig passed (it owns the options' rules).
absl::StatusOr<std::unique_ptr<KvEventPublisher>> StartKvEventPublisher(
    const KvEventOptions& options, const std::string& model_name,
    const lora::LoraRegistry* lora_registry);

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

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_KV_EVENTS_WIRING_H_

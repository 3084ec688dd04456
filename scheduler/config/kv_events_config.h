#ifndef PAGODA_SCHEDULER_CONFIG_KV_EVENTS_CONFIG_H_
#define PAGODA_SCHEDULER_CONFIG_KV_EVENTS_CONFIG_H_

// vLLM's --kv-events-config: its KVEventsConfig JSON object (what llm-d's
// guides pass to vLLM), read into the options the --kv-events-* flags set.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/config/server_config.h"

namespace pagoda::scheduler {

// vLLM's keys and defaults (vllm/config/kv_events.py), unknown keys refused:
//   enable_kv_cache_events (false)  events on; off, the rest is not used
//   publisher ("zmq" when enabled)  "zmq", or "null" for off
//   endpoint ("tcp://*:5557")       the PUB socket, bound or connected
//   replay_endpoint (none)          the replay ROUTER socket
//   buffer_steps (10000)            batches kept for replay
//   hwm (100000)                    the PUB socket's send high-water mark
//   max_queue_size (100000)         batches waiting for the publisher thread
//   topic ("")                      "" is Pagoda's kv@<pod>@<model> (below)
// Differences, each a choice: an empty topic is the --kv-events-topic
// default (kv@<pod>@<model>, llm-d's form) where vLLM sends an empty frame;
// a full queue drops the step's events and resyncs where vLLM's blocks the
// engine; hwm 0 (unbounded in ZeroMQ) is refused, as a stalled subscriber
// would grow the server's memory without bound. Errors say
// "--kv-events-config: ..." or name the key as "--kv-events-config.KEY".
absl::StatusOr<KvEventOptions> ParseKvEventsConfig(absl::string_view json);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_CONFIG_KV_EVENTS_CONFIG_H_

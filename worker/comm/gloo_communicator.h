#ifndef PAGODA_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define PAGODA_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/collective_communicator.h"
#include "worker/comm/rendezvous_store_client.h"
#include "wire/limits.h"

namespace pagoda::worker::comm {

// How a CPU rank joins its group: Gloo's TCP transport, with the peers'
// addresses exchanged through a RendezvousStoreServer.
struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  RendezvousAddress rendezvous;
  // The address this rank's Gloo pairs listen on; peers must reach it.
  std::string listen_host = "127.0.0.1";
  // Bounds every collective, and each step of joining the group: the
  // address exchange through the store waits up to `timeout`, and Gloo then
  // allows each pair's TCP connect up to 5 x `timeout`.
  std::chrono::milliseconds timeout{30000};
};

// Joins the group: blocks until all world_size ranks have joined or the
// timeout passes (DEADLINE_EXCEEDED / UNAVAILABLE). INVALID_ARGUMENT for a
// rank outside [0, world_size) or world_size outside [1, wire::kMaxWorldSize].
//
// Algorithm (why not Gloo's ring): tensor-parallel groups are small and most
// all-reduces are decode-sized, so one round in which every rank sends its
// buffer to every peer beats 2 (N - 1) ring rounds on latency, and summing the
// N contributions in rank order on every rank gives bitwise identical results
// everywhere. f16/bf16 travel and sum as f32 and are rounded once. Abort uses
// Gloo's per-buffer abort, which Gloo's built-in collectives do not expose.
absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateGlooCommunicator(
    const GlooOptions& options);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_GLOO_COMMUNICATOR_H_
